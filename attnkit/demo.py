"""`make demo`: a sample class graded end to end by the real nbgrader.

Steps, per assignment: PrepareCourse -> GenerateAssignment -> CollectSampleClass ->
Autograde -> GenerateFeedback, then ReportScores. The sample class is drawn from
the kit's own test corpus: a correct solution, a correct variant written
differently, the unanswered release, and two typical mistakes.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import nbformat

from attnkit.engine import config, registry

from attnkit.engine import datasets
from attnkit import mutants
from attnkit.course import gradebook_scores, nbgrader, write_course_config
from attnkit.table import Row, class_table, failed_note
from attnkit.class_report import write_report



def sample_class(course: Path, assignment: str) -> dict[str, str]:
    """Write the sample submissions into course/submitted; return student -> what they did."""
    demo = config.load(assignment).demo               # the manifest's [demo]: who did what
    subs = mutants.submissions(assignment)
    written = demo.get("written")                     # an assignment without a written answer has none
    for student, (_, how) in demo["students"].items():
        nb = subs[how]
        if how != "release" and written:
            mutants.cell(nb, written["cell"]).source = written["answer"]
        dest = course / "submitted" / student / assignment
        dest.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest / f"{assignment}.ipynb")
    return {s: what for s, (what, _) in demo["students"].items()}


def run_demo(course: Path, log=print, data_dir=None) -> int:
    """Grade the sample class; CorpusProblem (one sentence) before anything is graded when a corpus is missing."""
    t0 = time.monotonic()
    source = datasets.data_dir(data_dir)
    for name, sha in datasets.every_needed().items():
        datasets.verified(name, sha, source)
    os.environ[datasets.ENV_VAR] = str(Path(source).resolve())      # where nbgrader's kernel runs will look
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    write_course_config(course)
    log(f"PrepareCourse       {course}")
    for a in registry.names():
        shutil.copytree(registry.course() / "source" / a, course / "source" / a, symlinks=False)
        nbgrader("generate_assignment", a, "--force", cwd=course)
        log(f"GenerateAssignment  {course / 'release' / a}")
        students = sample_class(course, a)
        log(f"CollectSampleClass  {a}: " + ", ".join(f"{s} ({w})" for s, w in students.items()))
        nbgrader("autograde", a, cwd=course)
        log(f"Autograde           nbgrader autograde {a} (checks judged outside each student's kernel)")
        nbgrader("generate_feedback", a, cwd=course)
        log(f"GenerateFeedback    nbgrader generate_feedback {a}")
    for a in registry.names():
        scores = gradebook_scores(course, a)
        rows = [Row(s, v["auto"], v["max"], failed_note(v["lost"], v["written"])) for s, v in sorted(scores.items())]
        log(f"\n{a}: automatic points from the nbgrader gradebook\n" + class_table(rows))
        log("feedback: " + ", ".join(str(course / "feedback" / s / a / f"{a}.html") for s in sorted(scores)))
    for a in registry.names():
        log(f"class report for TAs: {write_report(course, a)}")
    log(f"\ndemo finished in {time.monotonic() - t0:.0f} s")
    return 0
