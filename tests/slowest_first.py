"""The suite's slowest tests start first, spread over the workers, so none of them is left to the end of a run.

pytest-xdist's worksteal (`make test`) hands each worker a contiguous share of the collection, and a worker
that runs out takes the tail of another's share. A 15-minute test that pytest's order puts late in a share
therefore runs alone at the end, after every other test. Here the tests slow_tests.txt names (its seconds,
from a `make test` run's --durations) open the shares instead, dealt longest first to the share with the least
listed seconds so far; the quick tests fill the shares in pytest's order, and are what is stolen at the end.

The tests of a module that use a module- or class-scoped fixture move together (their listed seconds summed), in
pytest's order: parted, they would build the fixture again on one worker. Run without workers, the slow tests simply go
first. Only the order changes: every test collected runs, and a test missing from the list is merely not moved.
"""
from __future__ import annotations

import heapq
from pathlib import Path

LIST = Path(__file__).with_name("slow_tests.txt")


def listed_seconds(text: str) -> dict[str, float]:
    """test id (a parametrized test's id without its parameters names each of them) -> seconds."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            seconds, nodeid = line.split(None, 1)
            out[nodeid] = float(seconds)
    return out


def _seconds(nodeid: str, known: dict[str, float]) -> float:
    return known.get(nodeid, known.get(nodeid.split("[", 1)[0], 0.0))


def _shares_a_fixture(item) -> bool:
    """Whether the item uses a fixture kept for its module or class (built again if such items were parted)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d[-1].scope in ("module", "class", "package") for d in defs if d)


def share_sizes(n: int, workers: int) -> list[int]:
    """How many tests worksteal first sends each worker (xdist/scheduler/worksteal.py: check_schedule)."""
    sizes = []
    for i in range(workers):
        sizes.append(n // (workers - i))
        n -= sizes[-1]
    return sizes


def order(items: list, known: dict[str, float], workers: int) -> list:
    """``items`` reordered: the listed ones leading ``workers`` shares, dealt longest first (see the docstring)."""
    units, modules = [], {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    for module in modules.values():
        together = [i for i in module if _shares_a_fixture(i)]
        if together:
            units.append((sum(_seconds(i.nodeid, known) for i in together), together))
        units.extend((_seconds(i.nodeid, known), [i]) for i in module if not _shares_a_fixture(i))
    units = sorted((u for u in units if u[0]), key=lambda u: -u[0])     # stable: equal seconds keep pytest's order
    moved = {id(i) for _, unit in units for i in unit}
    rest = [i for i in items if id(i) not in moved]                    # in pytest's order
    if workers <= 1:
        return [i for _, unit in units for i in unit] + rest
    shares = [(0.0, w, []) for w in range(workers)]      # (listed seconds so far, worker, its units)
    for seconds, unit in units:
        total, w, taken = heapq.heappop(shares)
        taken.extend(unit)
        heapq.heappush(shares, (total + seconds, w, taken))
    heads = [taken for _, _, taken in sorted(shares, key=lambda s: s[1])]
    sizes = share_sizes(len(items), workers)
    if any(len(h) > s for h, s in zip(heads, sizes)):   # a share would overflow: slowest first, undealt
        return [i for _, unit in units for i in unit] + rest
    out, fill = [], iter(rest)
    for head, size in zip(heads, sizes):
        out.extend(head)
        out.extend(next(fill) for _ in range(size - len(head)))
    return out


def reorder(config, items: list) -> None:
    """pytest_collection_modifyitems: every worker collects, and orders, the same way (xdist requires it)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)     # a worker's config says dist "no"
    items[:] = order(items, listed_seconds(LIST.read_text()), workers)


def from_durations(log: str, at_least: float = 20.0) -> str:
    """slow_tests.txt's lines from a pytest log's --durations table: each test's setup, call and teardown
    summed, those of ``at_least`` seconds, longest first."""
    import re
    total: dict[str, float] = {}
    for m in re.finditer(r"^([\d.]+)s (?:setup|call|teardown) +(\S.*?)\s*$", log, flags=re.M):
        total[m.group(2)] = total.get(m.group(2), 0.0) + float(m.group(1))
    return "".join(f"{s:.0f} {t}\n" for t, s in sorted(total.items(), key=lambda x: -x[1]) if s >= at_least)


if __name__ == "__main__":         # python -m tests.slowest_first LOG: the lines for slow_tests.txt
    import sys
    print(from_durations(Path(sys.argv[1]).read_text()), end="")
