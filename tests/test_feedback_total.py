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
from tests.fixture_course.fixtures import as_course
from tests.test_feedback_report import _text

from tests.fixture_course import MAX_SCORE, NAME as A

WRITTEN = 1            # the example's written answer: points a TA gives (its manifest's [manual])
OURS = Path(nbconvert_template_dirs()[0]) / "feedback" / "index.html.j2"
STOCK = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates" / "feedback" / "index.html.j2"


@pytest.fixture(scope="module")
def pages(tmp_path_factory, fixture_course_root):
    """The example's sample class of five, graded by `attnkit autograde`, its feedback by `nbgrader
    generate_feedback` (the fixture course: tests/fixture_course/)."""
    course = copy_course(fixture_course_root, tmp_path_factory.mktemp("total") / "course")
    with as_course(course):
        sample_class(course, A)
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course, capture_output=True,
                       text=True, timeout=600)
    assert "5 graded" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    run_nbgrader("generate_feedback", A, cwd=course)
    return {s: (course / "feedback" / s / A / f"{A}.html").read_text() for s in ("ada", "ben", "cy")}


def test_one_total_the_automatic_points_beside_the_written_answer(pages):
    total = MAX_SCORE + WRITTEN
    for student, points in (("ada", f"{MAX_SCORE} / {MAX_SCORE}"), ("cy", f"0 / {MAX_SCORE}")):
        html = pages[student]
        text = _text(html)
        assert f"{points} automatic points Written answer: not yet graded ({WRITTEN} point)" in text, text[-3000:]
        assert "(Score:" not in re.search(r"<h4>.*?</h4>", html, re.S).group(0)       # nbgrader's sum is gone
        total_shown = re.search(rf"\d(\.\d+)? / {total}(\.0)?(?![\d.])", text)          # ... everywhere
        assert total_shown is None, text[max(0, total_shown.start() - 200):total_shown.end() + 200]
        assert f"Written response (not yet graded, {WRITTEN}.0 points)" in text      # its contents line
        assert f"Not yet graded ({WRITTEN}.0 points)" in text                        # and the cell's own heading


def test_the_unanswered_release_says_so_and_names_no_cause(pages):
    text = _text(pages["ben"])
    assert "Not answered:" in text and f"0 / {MAX_SCORE} automatic points" in text
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
