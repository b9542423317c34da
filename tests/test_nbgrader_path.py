"""`nbgrader autograde` records exactly the points `attnkit grade` gives, in the real gradebook."""
import csv
import shutil

import nbformat
from nbgrader.api import Gradebook

from attnkit.course import nbgrader
from attnkit.demo import gradebook_scores
from autograder import config
from autograder.judge import grade
from tests.corpus import causal_head as corpus
from tests.notebooks import cell, solution_source


def _submit(course, student, head_src):
    nb = nbformat.read(course / "release" / "causal_head" / "causal_head.ipynb", as_version=4)
    if head_src is not None:
        cell(nb, "head").source = head_src
    dest = course / "submitted" / student / "causal_head"
    dest.mkdir(parents=True)
    nbformat.write(nb, dest / "causal_head.ipynb")
    (dest / "corpus.py").write_text("raise SystemExit('a student file must never replace the released one')\n")
    return dest / "causal_head.ipynb"


def test_autograde_agrees_with_attnkit_grade(course):
    nbgrader("generate_assignment", "causal_head", "--force", cwd=course)
    sol = solution_source("causal_head", "head")
    subs = {"alice": _submit(course, "alice", sol), "bob": _submit(course, "bob", None),
            "carol": _submit(course, "carol", corpus.mutate(sol, "mask_after_softmax"))}
    nbgrader("autograde", "causal_head", cwd=course)

    cells = config.load("causal_head").by_cell()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student, path in subs.items():
            direct = {c["id"]: c["points"] for c in grade(path, "causal_head")["checks"]}
            nb = gb.find_submission_notebook("causal_head", "causal_head", student)
            recorded = {cells[g.name].id: g.auto_score for g in nb.grades if g.name in cells}
            assert recorded == direct, student
    scores = gradebook_scores(course, "causal_head")
    assert scores["alice"]["auto"] == scores["alice"]["max"] == 20
    assert scores["bob"]["auto"] == 0
    assert "test_simplex_rows" in scores["carol"]["lost"]

    # feedback is generated and shows the judge's sentence, not hidden test source
    nbgrader("generate_feedback", "causal_head", cwd=course)
    html = (course / "feedback" / "carol" / "causal_head" / "causal_head.html").read_text()
    assert "do not sum to 1" in html and "BEGIN HIDDEN TESTS" not in html and "attnkit judges" not in html

    # the stock export still works on this gradebook
    nbgrader("export", cwd=course)
    rows = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv"))}
    assert float(rows["alice"]["raw_score"]) == 20.0 and float(rows["bob"]["raw_score"]) == 0.0
    shutil.rmtree(course / "autograded")
