"""Student text is inert in a TA's terminal: a submission whose source line, quoted back in its check messages,
carries OSC 52 (clipboard), OSC 0 (window title), a screen clear, a cursor move before a fake score, a bidi override,
zero-width and other format characters and C1 controls, and a student whose id carries a carriage return and some
too, graded through the real commands (`attnkit grade`, `attnkit autograde`, `attnkit export` to stdout): their
stdout and stderr hold none of those bytes, and the escapes (``\\x1b``, ``\\u202e``) show that they were there. The
CSV and the kit's HTML pages show them as escapes too (attnkit/engine/terminal.py, attnkit/safe_csv.py,
attnkit/nbgrader_ext/templating.py).

(An exception's own message no longer reaches a check message at all (attnkit/engine/channel.py); a line of the
student's source still does, up to 60 characters: the payload rides on a comment of the line that binds a
module-level `T` the head reads.)"""
import re
import subprocess

import nbformat
import pytest

from attnkit.course import BIN
from attnkit.engine.terminal import Inert, lines, visible
from attnkit.nbgrader_ext.templating import environment
from tests.conftest import copy_course
from tests.notebooks import hand_in, solution_source, submission, write

A = "causal_head"
# Each sequence a student could aim at a TA's terminal, short enough to be quoted whole: clipboard write, window
# title, clear screen, cursor to column 1 and a fake score, a bidi override, a zero-width space, a line separator,
# a C1 NEL, a C1 CSI (the quote is stripped: white space such as NEL must not end it).
PAYLOAD = "\x1b]52;c;aGk=\x07\x1b]0;p\x07\x1b[2J\x1b[1Gscore 20 / 20\u202e\x85\u200b\u2028\x9bm"
SHOWN = ["\\x1b]52;c;aGk=\\x07", "\\x1b]0;p\\x07", "\\x1b[2J\\x1b[1Gscore 20 / 20", "\\u202e\\x85\\u200b\\u2028\\x9bm"]
BINDING = "d, dh, T, B = 32, 16, 8, 4"
HOSTILE_ID = "mallory\r\x1b[2J\u202e\u200b"      # a folder name: a carriage return, a clear screen, bidi, zero-width
ID_SHOWN = "mallory\\r\\x1b[2J\\u202e\\u200b"
# what must never reach the terminal: C0 but newline and tab, DEL, C1 (as UTF-8), bidi controls and isolates,
# zero-width characters, U+2028/2029, BOM
FORBIDDEN = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8b-\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]"
                       rb"|\xef\xbb\xbf")


def hostile_notebook(nb):
    """``nb`` (a submission with the solution's head) made to quote PAYLOAD: the head reads the module-level `T`,
    whose binding line ends with PAYLOAD as a comment."""
    [cell] = [c for c in nb.cells if BINDING in c.source]
    cell.source = cell.source.replace(BINDING, f"T=8#{PAYLOAD}\nd, dh, B = 32, 16, 4", 1)
    return nb


def hostile_head() -> str:
    sol = solution_source(A, "head")
    bad = sol.replace("        B, T, d = x.shape\n", "        B, _, d = x.shape\n", 1)
    assert bad != sol
    return bad


def assert_inert(out: bytes):
    assert not FORBIDDEN.search(out), FORBIDDEN.findall(out)[:10]
    text = out.decode("utf-8")
    for escaped in SHOWN:
        assert escaped in text, (escaped, text[-3000:])


def test_visible_escapes_every_control_and_format_character():
    assert visible("plain text, é, 中文, 😀") == "plain text, é, 中文, 😀"
    assert visible(PAYLOAD) == "".join(SHOWN) and visible(HOSTILE_ID) == ID_SHOWN
    assert visible("a\nb\tc") == "a\\nb\\tc" and visible("a\nb", keep="\n") == "a\nb"
    assert visible("\u2066x\u2069\ufeff\u00ad\U000e0041") == "\\u2066x\\u2069\\ufeff\\xad\\U000e0041"
    assert lines("row\r\nrow\rfake\n") == "row\r\nrow\\rfake\n"


def test_an_inert_stream_writes_lines_through(tmp_path):
    path = tmp_path / "out"
    with open(path, "w", encoding="utf-8") as f:
        stream = Inert(f)
        print("score\x1b[2J", PAYLOAD, file=stream)
        assert stream.encoding == "utf-8"
    assert_inert(path.read_bytes())


def test_attnkit_grade_prints_the_table_inert(tmp_path):
    path = write(hostile_notebook(submission(A, {"head": hostile_head()})), tmp_path / "s.ipynb")
    p = subprocess.run([str(BIN / "attnkit"), "grade", str(path), "--assignment", A], capture_output=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    assert_inert(p.stdout + p.stderr)
    rows = p.stdout.decode().splitlines()
    assert rows[0].startswith(f"{A}: ") and not rows[0].startswith(f"{A}: 20 / 20"), rows[0]
    fails = [r for r in rows if r.startswith("  FAIL  ")]
    assert fails and any("".join(SHOWN) in r for r in fails), rows
    assert all(r.startswith((f"{A}: ", "  PASS  ", "  FAIL  ")) or r.lstrip().startswith("diagnosis: ")
               for r in rows), rows                                   # no line broken by the payload
    assert not any(r.lstrip().startswith("score 20 / 20") for r in rows), rows


def _submit(course, student, answer):
    """``answer`` as the student's Head in the release, their written answer filled, handed in to ``course``."""
    return hand_in(course, A, student, {"head": answer, "written_trap": "Permuting the rows of X moves each position "
                                        "vector with its token."})


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory, released_course):
    """A class of two graded by `attnkit autograde` (stdout and stderr kept as bytes): ada hands in the solution,
    a student whose id carries a bidi override raises the payload in forward."""
    course = copy_course(released_course, tmp_path_factory.mktemp("inert") / "course")
    _submit(course, "ada", solution_source(A, "head"))
    path = _submit(course, HOSTILE_ID, hostile_head())
    nbformat.write(hostile_notebook(nbformat.read(path, as_version=4)), path)
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course, capture_output=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    return course, p


def test_attnkit_autograde_prints_inert_lines(hostile_class):
    course, p = hostile_class
    out = p.stdout + p.stderr
    assert not FORBIDDEN.search(out), FORBIDDEN.findall(out)[:10]
    text = out.decode()
    assert ID_SHOWN in text, text[-3000:]                          # the progress line and the summary row
    summary = [r for r in p.stdout.decode().splitlines() if r.startswith("mallory")]
    assert len(summary) == 1 and ID_SHOWN in summary[0], p.stdout.decode()


def test_the_checks_csv_and_the_export_are_inert(hostile_class):
    course, _ = hostile_class
    data = (course / "autograded" / f"{A}-checks.csv").read_bytes()
    assert not FORBIDDEN.search(data.replace(b"\r\n", b"\n")), FORBIDDEN.findall(data)[:10]   # CSV's own CRLF
    assert "".join(SHOWN) in data.decode() and ID_SHOWN in data.decode()
    p = subprocess.run([str(BIN / "attnkit"), "export", A], cwd=course, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert not FORBIDDEN.search((p.stdout + p.stderr).replace(b"\r\n", b"\n"))
    assert ID_SHOWN.encode() + b"," in p.stdout and len(p.stdout.splitlines()) == 3   # header, ada, mallory


def test_the_kit_pages_show_bidi_and_controls_as_escapes():
    page = environment().from_string("<p>{{ m }}</p><p>{{ ids|join(', ') }}</p><pre>{{ code }}</pre>").render(
        m=PAYLOAD, ids=[HOSTILE_ID, "<b>"], code="a = 1\n\tb = '\u202e'")
    assert "".join(SHOWN) in page and f"{ID_SHOWN}, &lt;b&gt;" in page
    assert "a = 1\n\tb = &#39;\\u202e&#39;" in page                   # newline and tab kept in code
    assert not FORBIDDEN.search(page.encode()), page
