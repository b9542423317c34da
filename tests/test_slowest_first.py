"""The suite's order (tests/slowest_first.py): the listed slow tests open the workers' shares, longest first, dealt
to the share with the least listed seconds; a module with a module-scoped fixture stays in one piece; every test
collected is kept."""
from types import SimpleNamespace

from tests.slowest_first import LIST, from_durations, listed_seconds, order, share_sizes


def _item(nodeid, scope="function"):
    fixture = SimpleNamespace(scope=scope)
    return SimpleNamespace(nodeid=nodeid, _fixtureinfo=SimpleNamespace(name2fixturedefs={"f": [fixture]}))


def _items():
    quick = [_item(f"tests/test_q.py::t{i}") for i in range(20)]
    return quick[:10] + [
        _item("tests/test_a.py::slow_a"), _item("tests/test_a.py::quick_a"),
        _item("tests/test_m.py::m1", "module"), _item("tests/test_m.py::free"),
        _item("tests/test_m.py::m2[x]", "module"), _item("tests/test_m.py::m3", "module"),
        _item("tests/test_b.py::slow_b[1]"), _item("tests/test_b.py::slow_b[2]"), _item("tests/test_c.py::slow_c"),
    ] + quick[10:]


KNOWN = {"tests/test_a.py::slow_a": 900, "tests/test_m.py::m1": 300, "tests/test_m.py::m2": 250,
         "tests/test_b.py::slow_b": 100, "tests/test_c.py::slow_c": 50}


def test_shares_are_worksteals():
    assert share_sizes(28, 2) == [14, 14] and share_sizes(29, 2) == [14, 15] and share_sizes(10, 3) == [3, 3, 4]


def test_the_slow_tests_open_each_share_longest_first():
    items = _items()
    out = [i.nodeid for i in order(items, KNOWN, 2)]
    assert sorted(out) == sorted(i.nodeid for i in items)                # a permutation: nothing lost, nothing twice
    first, second = out[:14], out[14:]
    # 900 to share 0; the tests of the module-scoped fixture (550, m3 unlisted among them, together, in pytest's
    # order) to share 1; then 100 + 100 and 50 to share 1; "free" (no such fixture, not listed) stays in place
    assert first[:1] == ["tests/test_a.py::slow_a"] and first[1].startswith("tests/test_q.py"), first
    assert second[:6] == ["tests/test_m.py::m1", "tests/test_m.py::m2[x]", "tests/test_m.py::m3",
                          "tests/test_b.py::slow_b[1]", "tests/test_b.py::slow_b[2]", "tests/test_c.py::slow_c"], second
    rest = [n for n in out if KNOWN.get(n.split("[")[0]) is None and n not in ("tests/test_m.py::m2[x]",
                                                                              "tests/test_m.py::m3")]
    assert rest == [i.nodeid for i in items if i.nodeid in rest]           # the quick ones keep pytest's order


def test_alone_the_slow_tests_go_first():
    out = [i.nodeid for i in order(_items(), KNOWN, 1)]
    assert out[:7] == ["tests/test_a.py::slow_a", "tests/test_m.py::m1", "tests/test_m.py::m2[x]",
                       "tests/test_m.py::m3", "tests/test_b.py::slow_b[1]", "tests/test_b.py::slow_b[2]",
                       "tests/test_c.py::slow_c"], out


def test_nothing_listed_changes_nothing():
    items = _items()
    assert order(items, {}, 2) == items and order(items, {}, 1) == items


def test_the_list_reads_a_durations_table_and_the_committed_list_parses():
    log = ("12.50s setup    tests/test_a.py::slow_a\n30.00s call     tests/test_a.py::slow_a\n"
           "25.00s call     tests/test_b.py::slow_b[with space]\n3.00s call     tests/test_c.py::quick\n")
    lines = from_durations(log)
    assert lines == "42 tests/test_a.py::slow_a\n25 tests/test_b.py::slow_b[with space]\n", lines
    assert listed_seconds(lines) == {"tests/test_a.py::slow_a": 42.0, "tests/test_b.py::slow_b[with space]": 25.0}
    known = listed_seconds(LIST.read_text())
    assert known and all(nodeid.startswith(("tests/test_", "tests/course/test_")) and "::" in nodeid for nodeid in known)
