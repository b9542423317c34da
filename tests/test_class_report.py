"""The class report of a graded class, rendered in a real browser."""
import re
import subprocess

from attnkit.course import BIN, nbgrader
from attnkit.demo import sample_class
from tests.browser import render


def test_class_report_shows_histogram_checks_mistakes_and_students(course):
    nbgrader("generate_assignment", "causal_head", "--force", cwd=course)
    sample_class(course, "causal_head")
    p = subprocess.run([str(BIN / "attnkit"), "autograde", "causal_head", "--jobs", "2"], cwd=course,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([str(BIN / "attnkit"), "report", "causal_head"], cwd=course, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    page = course / "reports" / "causal_head-class-report.html"
    assert p.stdout.strip() == str(page)
    dom = render(page)
    assert re.search(r'data-heatmaps-loaded="2"', dom) and "data-js-errors" not in dom
    assert "5 submissions" in dom
    students = re.search(r"<table class=\"sortable\" id=\"students\">.*?</table>", dom, re.S).group(0)
    assert students.count("<tr>") == 6                          # header + one row per student
    assert "Mask applied after the softmax" in dom and "No 1/sqrt(d_k) scaling" in dom
    assert "feedback/cy/causal_head/causal_head.html" in dom
