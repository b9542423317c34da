"""The page a student opens after `nbgrader generate_feedback` (issue 32): one total, the automatic points beside
the written answer's state; "not answered" for the unanswered release; no "no known pattern" anywhere.
attnkit/templates/nbconvert/feedback/index.html.j2 is nbgrader's feedback template with its heading changed:
held here to nbgrader's own outside those lines."""
import re
import subprocess
from pathlib import Path

import nbgrader
import pytest

from attnkit.course import BIN, nbgrader as run_nbgrader
from attnkit.demo import sample_class
from attnkit.nbgrader_ext.feedback_report import nbconvert_template_dirs
from tests.conftest import copy_course
from tests.test_feedback_report import _text

A = "causal_head"
OURS = Path(nbconvert_template_dirs()[0]) / "feedback" / "index.html.j2"
STOCK = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates" / "feedback" / "index.html.j2"


@pytest.fixture(scope="module")
def pages(tmp_path_factory, released_course):
    """The demo's class of five, graded by `attnkit autograde`, its feedback by `nbgrader generate_feedback`."""
    course = copy_course(released_course, tmp_path_factory.mktemp("total") / "course")
    sample_class(course, A)
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course, capture_output=True,
                       text=True, timeout=600)
    assert "5 graded" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    run_nbgrader("generate_feedback", A, cwd=course)
    return {s: (course / "feedback" / s / A / f"{A}.html").read_text() for s in ("ada", "ben", "cy")}


def test_one_total_the_automatic_points_beside_the_written_answer(pages):
    for student, points in (("ada", "20 / 20"), ("cy", "11 / 20")):
        html = pages[student]
        text = _text(html)
        assert f"{points} automatic points Written answer: not yet graded (2 points)" in text, text[:1500]
        assert "(Score:" not in re.search(r"<h4>.*?</h4>", html, re.S).group(0)       # nbgrader's sum is gone
        assert "/ 22" not in text and "22.0" not in text                              # ... everywhere
        assert "Written response (not yet graded, 2.0 points)" in text               # its contents line
        assert "Not yet graded (2.0 points)" in text                                 # and the cell's own heading


def test_the_unanswered_release_says_so_and_names_no_cause(pages):
    text = _text(pages["ben"])
    assert "Not answered:" in text and "0 / 20 automatic points" in text
    assert "no known pattern" not in text.lower()
    assert "Not answered" not in _text(pages["cy"])


def test_the_kits_feedback_template_is_nbgraders_outside_its_heading():
    """Between attnkit's comment and nbgrader's own lines, only the lines that show a total differ: an nbgrader
    whose template changed (a new pin) fails here, so the copy is brought up to date rather than drifting."""
    ours = OURS.read_text()
    ours = ours[ours.index("#}\n") + 3:].splitlines()
    stock = STOCK.read_text().splitlines()
    kept = [line for line in ours if line in stock]
    changed = [line for line in stock if line not in ours]
    assert kept == [line for line in stock if line in kept]            # nbgrader's lines, in nbgrader's order
    assert len(changed) == 2 and all("Score:" in line for line in changed), changed   # the cells' score lines
    heading = "        <h4>{{ resources.nbgrader.notebook }} (Score:"                   # nbgrader's sum: only for a
    assert sum(line.startswith(heading) for line in ours) == 1                          # notebook the kit did not grade
