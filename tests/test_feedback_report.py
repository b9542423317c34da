"""The teaching report, rendered by a real browser: score, diagnosis and the two heatmaps.

The reports of the fixture course's example (tests/fixture_course/), each made once by `attnkit grade --report`
in the course; the rest renders judge results built here."""
import re
import subprocess
from html.parser import HTMLParser

import nbformat
import pytest

from attnkit.nbgrader_ext import feedback_report
from attnkit.course import BIN
from tests.browser import render
from tests.fixture_course import MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course

MISTAKE, TOLD = "mistake:normalised_over_columns", "Normalised over the wrong axis"    # the example's first


@pytest.fixture(scope="module")
def report(fixture_course_root, tmp_path_factory):
    """name -> the teaching report of the example's corpus submission ``name`` (made on first use, then kept)."""
    folder, made = tmp_path_factory.mktemp("reports"), {}

    def get(name):
        if name not in made:
            nb, html = folder / f"{name}.ipynb", folder / f"{name}.html"
            with as_course(fixture_course_root):
                from attnkit.mutants import submissions
                nbformat.write(submissions(A)[name], str(nb))
            p = subprocess.run([str(BIN / "attnkit"), "grade", str(nb), "--assignment", A, "--report", str(html)],
                               cwd=fixture_course_root, capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            made[name] = html
        return made[name]
    return get


def test_report_renders_score_diagnosis_and_both_heatmaps(report, tmp_path):
    html = report(MISTAKE)
    text = html.read_text()
    assert "BEGIN HIDDEN" not in text and "def test_" not in text and "softmax_rows(scores)" not in text
    dom = render(html, screenshot=tmp_path / "report.png")
    assert re.search(r'<body[^>]*data-heatmaps-loaded="2"', dom), "both heatmaps must decode in the browser"
    assert "data-js-errors" not in dom
    assert f"0 / {MAX_SCORE}" in dom and TOLD in dom
    assert "cells differ (red)" in dom and (tmp_path / "report.png").stat().st_size > 10_000


def test_report_for_a_submission_without_weights_says_so(report):
    dom = render(report("release"))
    assert f"0 / {MAX_SCORE}" in dom and "No attention weights could be read" in dom
    assert re.search(r'data-heatmaps-loaded="1"', dom)            # the expected pattern is still shown


# What a student controls in a result, hostile: markup, an attribute break-out, template syntax (Jinja's, which
# renders the report), and a blank line (nbgrader puts the report in a markdown cell, where one ends the HTML).
HOSTILE = '<script>alert(1)</script> "><img src=x onerror=alert(2)> {{ 7*7 }} {% raw %}\n\n*em* &amp;'


def _hostile_result() -> dict:
    """A judge result (the shape feedback_report reads) whose every free-text field is the student's."""
    failed = {"id": "test_simplex_rows", "title": f"title: {HOSTILE}", "points": 0.0, "max_points": 2.0,
              "passed": False, "message": f"message: {HOSTILE}", "diagnosis": f"diagnosis: {HOSTILE}. Why it breaks."}
    passed = {"id": "test_shape", "title": "shape", "points": 1.0, "max_points": 1.0, "passed": True, "message": ""}
    return {"assignment": A, "score": 1.0, "max_score": 20.0, "error": f"error: {HOSTILE}",
            "checks": [failed, passed],
            "attention": {"caption": f"caption: {HOSTILE}", "expected": [[1.0, 0.0], [0.5, 0.5]],
                          "student": [[0.5, 0.5], [0.5, 0.5]]}}


class _Parsed(HTMLParser):
    """The elements and the text of a page, as a browser's parser splits them."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _leaks(page: str, student: str, kit_scripts: int) -> list[str]:
    """How the hostile strings escaped being plain text: markup of theirs in the page, template syntax evaluated,
    or a field whose text did not arrive whole (markdown took it apart). Empty when each came out as text."""
    parsed = _Parsed(page)
    leaks = [f"<{tag} {attrs}>" for tag, attrs in parsed.tags
             if any(a.startswith("on") for a in attrs)
             or (tag == "img" and not attrs.get("src", "").startswith("data:image/png;base64,"))]
    scripts = [a for tag, a in parsed.tags if tag == "script"]
    if len(scripts) != kit_scripts:
        leaks.append(f"{len(scripts)} <script> elements, the kit has {kit_scripts}")
    if any(tag == "em" for tag, _ in parsed.tags):
        leaks.append("markdown emphasis: the report's text was read as markdown")
    text = " ".join(" ".join(parsed.text).split())          # as shown: line breaks are spaces
    shown = " ".join(HOSTILE.split())
    for field in ("error", "title", "message", "diagnosis", "caption"):
        if f"{field}: {shown}" not in text:
            leaks.append(f"the {field} is not shown as the text it is")
    if f"{' '.join(student.split())}: automatic checks" not in text:
        leaks.append("the student id is not shown as the text it is")
    if "49" in text:
        leaks.append("{{ 7*7 }} was evaluated")
    return leaks


def _renderings(student: str) -> dict[str, tuple[str, int]]:
    """name -> (HTML, how many <script> elements of the kit's own it has): the page of `attnkit grade --report`,
    the fragment, and the fragment as nbgrader's feedback shows it (a markdown cell, through nbconvert's markdown)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    result = _hostile_result()
    fragment = feedback_report.fragment(result, student)
    return {"page": (feedback_report.page(result, student), 1), "fragment": (fragment, 0),
            "markdown cell": (markdown2html_mistune(fragment), 0)}


STUDENT = f"student: {HOSTILE}"         # a folder name may hold all of it, line breaks included


def test_hostile_student_strings_come_out_as_text_never_markup_or_template_syntax():
    for name, (page, kit_scripts) in _renderings(STUDENT).items():
        assert _leaks(page, STUDENT, kit_scripts) == [], name
        assert page.count("{{ 7*7 }}") >= 6 and page.count("{% raw %}") >= 6, name   # printed, not parsed


def test_the_hostile_check_catches_autoescape_off(monkeypatch):
    """The same renderings with the shared environment's autoescape off (a kit that trusted the strings): the
    check above must see the student's markup."""
    import jinja2
    from attnkit.nbgrader_ext import templating
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templating.TEMPLATES)), autoescape=False,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(templating.environment().filters)
    monkeypatch.setattr(templating, "environment", lambda: env)
    for name, (page, kit_scripts) in _renderings(STUDENT).items():
        leaks = _leaks(page, STUDENT, kit_scripts)
        assert any("<script>" in leak or "onerror" in leak for leak in leaks), (name, leaks)


# ---------------------------------------------------------------------------------------- issue 32: what a page says

def _check(cid, passed, message="passed", diagnosis=None, diagnosis_id=None):
    return {"id": cid, "title": cid, "passed": passed, "points": 1.0 if passed else 0.0, "max_points": 1.0,
            "message": message, "diagnosis": diagnosis, "diagnosis_id": diagnosis_id}


MASK = "Mask applied after the softmax. Your weights are softmax(S) with the future zeroed afterwards."
SCALE = "No 1/sqrt(d_k) scaling. The scores are not divided by sqrt(d_head)."


def _result(*checks) -> dict:
    return {"assignment": A, "score": sum(c["points"] for c in checks), "max_score": float(len(checks)),
            "error": None, "checks": list(checks), "attention": None}


def _text(html: str) -> str:
    return " ".join(" ".join(_Parsed(html).text).split())


def test_a_cause_shared_by_two_checks_is_said_once_with_both_checks():
    result = _result(_check("simplex_rows", False, "rows sum to 0.7", MASK, "mask_after_softmax"),
                     _check("lower_triangular", False, "weight on the future", MASK, "mask_after_softmax"),
                     _check("scaling", False, "division by 4", SCALE, "no_scaling"), _check("interface", True))
    for html in (feedback_report.page(result), feedback_report.fragment(result)):
        text = _text(html)
        assert text.count("Mask applied after the softmax") == 1, text
        assert text.count("No 1/sqrt(d_k) scaling") == 1, text
        assert "(checks: simplex_rows, lower_triangular)" in text and "(checks: scaling)" in text
        assert html.count('class="diagnosis"') == 2


def test_no_known_pattern_is_said_nowhere():
    result = _result(_check("simplex_rows", False, "rows sum to 0.7", "no known pattern", None),
                     _check("scaling", False, "division by 4", "no known pattern", None), _check("interface", True))
    html = feedback_report.page(result)
    assert "no known pattern" not in html.lower() and 'class="diagnosis"' not in html
    assert "rows sum to 0.7" in html and "division by 4" in html          # the checks' own sentences stay


def test_verdict_cells_drop_no_known_pattern_and_keep_a_named_cause():
    from attnkit.nbgrader_ext.steps import verdict_outputs
    unnamed = verdict_outputs(_check("scaling", False, "division by 4", "no known pattern", None))[0]
    named = verdict_outputs(_check("scaling", False, "division by 4", SCALE, "no_scaling"))[0]
    assert unnamed["evalue"] == "division by 4"
    assert named["evalue"] == f"division by 4\nDiagnosis: {SCALE}"


def test_the_unanswered_release_says_not_answered_and_names_no_cause(report):
    html = report("release").read_text()
    text = _text(html)
    assert "Not answered:" in text and f"0 / {MAX_SCORE}" in text, text[:600]
    assert "no known pattern" not in text.lower() and 'class="diagnosis"' not in html


def test_a_mistake_is_not_taken_for_an_unanswered_notebook(report):
    text = _text(report(MISTAKE).read_text())
    assert "Not answered" not in text and text.count(TOLD) == 1, text[:800]


def test_the_written_answer_state_stands_beside_the_automatic_points():
    result = _result(_check("scaling", False, "division by 4"), _check("interface", True))
    waiting = _text(feedback_report.fragment(result, written={"graded": False, "score": None, "max": "2"}))
    graded = _text(feedback_report.fragment(result, written={"graded": True, "score": "1.5", "max": "2"}))
    assert "1 / 2 automatic points Written answer: not yet graded (2 points)" in waiting
    assert "Written answer: graded, 1.5 of 2 points" in graded
    one = _text(feedback_report.fragment(result, written={"graded": False, "score": None, "max": "1"}))
    assert "not yet graded (1 point)" in one                                  # one point, not "1 points"
    assert "Written answer" not in _text(feedback_report.fragment(result))   # a page that does not know says nothing


def test_a_correct_answers_picture_has_no_red_cell(report):
    """The student's picture leaves the judge rounded to steps of 0.05 (attnkit/engine/channel.py picture), the
    expected one does not: compared cell by cell at 1e-4, the solution's showed "20 cells differ (red)" (found on
    the page screenshots of session 16). A wrong answer's picture still differs where its weights do."""
    right = report("solution").read_text()
    assert "the same at the picture's resolution" in right and "cells differ" not in right
    assert "cells differ (red)" in report(MISTAKE).read_text()
