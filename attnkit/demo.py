"""`make demo`: a sample class graded end to end by the real nbgrader.

Steps, per assignment: PrepareCourse -> GenerateAssignment -> CollectSampleClass ->
Autograde -> GenerateFeedback, then ReportScores. The sample class is drawn from
the kit's own test corpus: a correct solution, a correct variant written
differently, the unanswered release, and two typical mistakes.
"""
from __future__ import annotations

import importlib
import shutil
import time
from pathlib import Path

import nbformat

from . import KIT_ROOT
from .course import gradebook_scores, kit_corpus, nbgrader, write_course_config
from .table import class_table

ASSIGNMENTS = ("causal_head", "attention_lm")
# student -> (what they did, how: "solution", "release", "mistake:NAME" or "alternative:NAME"), per assignment
CLASS = {
    "causal_head": {"ada": ("correct solution", "solution"), "ben": ("unanswered release", "release"),
                    "cy": ("masks after the softmax", "mistake:mask_after_softmax"),
                    "dee": ("forgets the 1/sqrt(d_k) scale", "mistake:no_scale"),
                    "eve": ("correct, written with einsum", "alternative:einsum")},
    "attention_lm": {"ada": ("correct solution", "solution"), "ben": ("unanswered release", "release"),
                     "cy": ("no padding mask", "mistake:no_padding_mask"),
                     "dee": ("scales by sqrt(d_model)", "mistake:scaled_by_model_width"),
                     "eve": ("correct, forward calls forward_details", "alternative:forward_calls_details")},
}
WRITTEN = {"causal_head": ("written_trap", "Permuting the rows of X moves each position vector together with its "
                           "token, so the layer stays equivariant; one must permute the tokens."),
           "attention_lm": ("written_last_query", "With the causal mask the last row only needs its own query "
                            "against all keys, and the loss uses one target per window.")}


def sample_class(course: Path, assignment: str) -> dict[str, str]:
    """Write the sample submissions into course/submitted; return student -> what they did."""
    subs = kit_corpus().submissions(assignment)
    cell = importlib.import_module("tests.notebooks").cell
    for student, (_, how) in CLASS[assignment].items():
        nb = subs[how]
        if how != "release":
            written_id, text = WRITTEN[assignment]
            cell(nb, written_id).source = text
        dest = course / "submitted" / student / assignment
        dest.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest / f"{assignment}.ipynb")
    return {s: what for s, (what, _) in CLASS[assignment].items()}


def run_demo(course: Path, log=print) -> int:
    t0 = time.monotonic()
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    write_course_config(course)
    log(f"PrepareCourse       {course}")
    for a in ASSIGNMENTS:
        shutil.copytree(KIT_ROOT / "source" / a, course / "source" / a, symlinks=False)
        nbgrader("generate_assignment", a, "--force", cwd=course)
        log(f"GenerateAssignment  {course / 'release' / a}")
        students = sample_class(course, a)
        log(f"CollectSampleClass  {a}: " + ", ".join(f"{s} ({w})" for s, w in students.items()))
        nbgrader("autograde", a, cwd=course)
        log(f"Autograde           nbgrader autograde {a} (checks judged outside each student's kernel)")
        nbgrader("generate_feedback", a, cwd=course)
        log(f"GenerateFeedback    nbgrader generate_feedback {a}")
    for a in ASSIGNMENTS:
        scores = gradebook_scores(course, a)
        rows = [(s, v["auto"], v["max"], ", ".join(v["lost"]) + ("  [written answer awaits a TA]" if v["manual_pending"] else ""))
                for s, v in sorted(scores.items())]
        log(f"\n{a}: automatic points from the nbgrader gradebook\n" + class_table(rows))
        log("feedback: " + ", ".join(str(course / "feedback" / s / a / f"{a}.html") for s in sorted(scores)))
    from .class_report import write_report
    for a in ASSIGNMENTS:
        log(f"class report for TAs: {write_report(course, a)}")
    log(f"\ndemo finished in {time.monotonic() - t0:.0f} s")
    return 0
