"""`nbgrader autograde` records exactly the points `attnkit grade` gives, in the real gradebook."""
import csv
import re

import nbformat
import pytest
from nbgrader.api import Gradebook

from attnkit.course import nbgrader
from attnkit.course import gradebook_scores
from autograder import config
from autograder.judge import grade
from tests.corpus import module as corpus
from tests.notebooks import cell, solution_source

CASES = {"causal_head": ("mask_after_softmax", "test_simplex_rows", "do not sum to 1"),
         "attention_lm": ("no_padding_mask", "hidden_padded_keys", "padded keys")}


def _submit(course, assignment, student, answer):
    nb = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    if answer is not None:
        cell(nb, corpus(assignment).SOLUTION_CELL).source = answer
    dest = course / "submitted" / student / assignment
    dest.mkdir(parents=True)
    nbformat.write(nb, dest / f"{assignment}.ipynb")
    # a file handed in beside the notebook must not replace the released helper of the same name
    for helper in (course / "source" / assignment).glob("*.py"):
        if not helper.name.endswith(".pct.py"):
            (dest / helper.name).write_text("raise SystemExit('student copy')\n")
    return dest / f"{assignment}.ipynb"


@pytest.mark.parametrize("assignment", sorted(CASES))
def test_autograde_agrees_with_attnkit_grade(course, assignment):
    mistake, lost_cell, words = CASES[assignment]
    nbgrader("generate_assignment", assignment, "--force", cwd=course)
    sol = solution_source(assignment, corpus(assignment).SOLUTION_CELL)
    subs = {"alice": _submit(course, assignment, "alice", sol), "bob": _submit(course, assignment, "bob", None),
            "carol": _submit(course, assignment, "carol", corpus(assignment).mutate(sol, mistake))}
    nbgrader("autograde", assignment, cwd=course)

    cfg = config.load(assignment)
    cells = cfg.by_cell()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student, path in subs.items():
            direct = {c["id"]: c["points"] for c in grade(path, assignment)["checks"]}
            nb = gb.find_submission_notebook(assignment, assignment, student)
            recorded = {cells[g.name].id: g.auto_score for g in nb.grades if g.name in cells}
            assert recorded == direct, student
    scores = gradebook_scores(course, assignment)
    assert scores["alice"]["auto"] == scores["alice"]["max"] == cfg.max_score
    assert scores["bob"]["auto"] == 0
    assert lost_cell in scores["carol"]["lost"]

    # feedback is generated and shows the judge's sentence, not hidden test source
    nbgrader("generate_feedback", assignment, cwd=course)
    html = (course / "feedback" / "carol" / assignment / f"{assignment}.html").read_text()
    assert words in html and "BEGIN HIDDEN TESTS" not in html and "attnkit judges" not in html
    assert "What went wrong:" in html and len(re.findall(r"class=[\"']heatmap[\"']", html)) == 2  # the report leads

    # the stock export still works on this gradebook
    nbgrader("export", cwd=course)
    rows = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv"))}
    assert float(rows["alice"]["raw_score"]) == cfg.max_score and float(rows["bob"]["raw_score"]) == 0.0
