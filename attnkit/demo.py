"""`make demo`: a sample class graded end to end by the real nbgrader.

Steps: PrepareCourse -> GenerateAssignment -> CollectSampleClass -> Autograde ->
GenerateFeedback -> ReportScores. The sample class is drawn from the kit's own
test corpus: a correct head, an einsum variant, the unanswered release, and
typical mistakes.
"""
from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path

import nbformat

from . import KIT_ROOT
from .course import nbgrader, write_course_config
from .table import class_table

ASSIGNMENT = "causal_head"
WRITTEN = ("Permuting the rows of X moves each position vector together with its token, so the layer "
           "stays equivariant; the symmetry breaks in the embedding, so one must permute the tokens.")


def _corpus():
    spec = importlib.util.spec_from_file_location("corpus_causal_head", KIT_ROOT / "tests" / "corpus" / "causal_head.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def sample_class(course: Path) -> dict[str, str]:
    """Write the sample submissions into course/submitted; return student -> what they did."""
    corpus = _corpus()
    release_nb = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    solution = _cell(nbformat.read(KIT_ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4), "head").source
    preamble = "import torch, torch.nn as nn, torch.nn.functional as F\n"
    students = {
        "ada": ("correct solution", solution),
        "ben": ("unanswered release", None),
        "cy": ("masks after the softmax", corpus.mutate(solution, "mask_after_softmax")),
        "dee": ("forgets the 1/sqrt(d_k) scale", corpus.mutate(solution, "no_scale")),
        "eve": ("correct, written with einsum", preamble + corpus.ALTERNATIVES["einsum"]),
    }
    for student, (_, head_src) in students.items():
        nb = nbformat.read(release_nb, as_version=4)
        if head_src is not None:
            _cell(nb, "head").source = head_src
            _cell(nb, "written_trap").source = WRITTEN
        dest = course / "submitted" / student / ASSIGNMENT
        dest.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest / f"{ASSIGNMENT}.ipynb")
    return {s: what for s, (what, _) in students.items()}


def gradebook_scores(course: Path, assignment: str) -> dict[str, dict]:
    """Per student: automatic points, their maximum, and the grade cells that lost points."""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(assignment):
            auto = [g for nb in sub.notebooks for g in nb.grades if g.cell_type == "code"]
            out[sub.student.id] = {
                "auto": sum(g.auto_score or 0 for g in auto), "max": sum(g.max_score for g in auto),
                "lost": [g.name for g in auto if (g.auto_score or 0) < g.max_score],
                "manual_pending": any(g.needs_manual_grade for nb in sub.notebooks for g in nb.grades)}
    return out


def run_demo(course: Path, log=print) -> int:
    t0 = time.monotonic()
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    write_course_config(course)
    shutil.copytree(KIT_ROOT / "source" / ASSIGNMENT, course / "source" / ASSIGNMENT, symlinks=False)
    log(f"PrepareCourse       {course}")
    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    log(f"GenerateAssignment  {course / 'release' / ASSIGNMENT}")
    students = sample_class(course)
    log(f"CollectSampleClass  {len(students)} submissions: " + ", ".join(f"{s} ({w})" for s, w in students.items()))
    nbgrader("autograde", ASSIGNMENT, cwd=course)
    log("Autograde           nbgrader autograde (hidden checks judged outside each student's kernel)")
    nbgrader("generate_feedback", ASSIGNMENT, cwd=course)
    log("GenerateFeedback    nbgrader generate_feedback")
    scores = gradebook_scores(course, ASSIGNMENT)
    rows = [(s, v["auto"], v["max"], ", ".join(v["lost"]) + ("  [written answer awaits a TA]" if v["manual_pending"] else ""))
            for s, v in sorted(scores.items())]
    log("\nAutomatic points from the nbgrader gradebook:\n" + class_table(rows))
    log("\nFeedback for students:")
    for s in sorted(scores):
        log(f"  {course / 'feedback' / s / ASSIGNMENT / (ASSIGNMENT + '.html')}")
    log(f"\ndemo finished in {time.monotonic() - t0:.0f} s")
    return 0
