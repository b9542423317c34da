"""The teaching report, rendered by a real browser: score, diagnosis and the two heatmaps."""
import re
import subprocess

import nbformat

from attnkit.course import BIN
from tests.browser import render
from attnkit.corpus import submissions as corpus_submissions


def _report(tmp_path, assignment, name):
    nb = tmp_path / f"{name}.ipynb"
    nbformat.write(corpus_submissions(assignment)[name], str(nb))
    html = tmp_path / f"{name}.html"
    p = subprocess.run([str(BIN / "attnkit"), "grade", str(nb), "--assignment", assignment, "--report", str(html)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return html


def test_report_renders_score_diagnosis_and_both_heatmaps(tmp_path):
    html = _report(tmp_path, "causal_head", "mistake:mask_after_softmax")
    text = html.read_text()
    assert "BEGIN HIDDEN" not in text and "def test_" not in text and "head_forward" not in text
    dom = render(html, screenshot=tmp_path / "report.png")
    assert re.search(r'<body[^>]*data-heatmaps-loaded="2"', dom), "both heatmaps must decode in the browser"
    assert "data-js-errors" not in dom
    assert "11 / 20" in dom and "Mask applied after the softmax" in dom
    assert "cells differ (red)" in dom and (tmp_path / "report.png").stat().st_size > 10_000


def test_report_for_a_submission_without_weights_says_so(tmp_path):
    dom = render(_report(tmp_path, "attention_lm", "release"))
    assert "0 / 22" in dom and "No attention weights could be read" in dom
    assert re.search(r'data-heatmaps-loaded="1"', dom)            # the expected pattern is still shown
