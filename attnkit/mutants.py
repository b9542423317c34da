"""Corpora of submissions: typical mistakes (as edits of a solution cell) and correct alternatives.

Each assignment's own is ``autograder/<A>/mutants.py``, built with attnkit/toolkit/corpus.py (the names the kit
reads there are listed in that module); this module builds the corpus's notebooks the way a student would: the
release with the answer cell filled in.
"""
import nbformat

from attnkit.engine import registry
# What a course's mutants.py builds its corpus with lives in the toolkit; the kit's tests and benches find it here too.
from attnkit.toolkit.corpus import (RESTART_PROFILER, STOP_PROFILER, UNREGISTER_STAND_INS, Mutant,  # noqa: F401
                                    apply_edits, lines, modes_popped, mutant, variant)


def module(assignment: str):
    """The mutant submissions of one assignment: MUTANTS, ALTERNATIVES, SOLUTION_CELL, mutate(), alternative()."""
    return registry.get(assignment).mutants()


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def solution_source(assignment: str, grade_id: str) -> str:
    nb = nbformat.read(registry.get(assignment).source / f"{assignment}.ipynb", as_version=4)
    return cell(nb, grade_id).source


def submission(assignment: str, answers: dict[str, str], base: str = "release"):
    """The committed release (or source) notebook with the cells named in ``answers`` replaced."""
    folder = registry.get(assignment).source if base == "source" else registry.course() / base / assignment
    nb = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    for grade_id, src in answers.items():
        cell(nb, grade_id).source = src
    return nb


def submissions(assignment: str) -> dict:
    """name -> notebook: the solution, the unanswered release, every mistake, every variant of one
    (``variant:NAME``) and every alternative."""
    c = module(assignment)
    sol = solution_source(assignment, c.SOLUTION_CELL)
    subs = {"solution": submission(assignment, {c.SOLUTION_CELL: sol}), "release": submission(assignment, {})}
    subs.update({f"mistake:{n}": submission(assignment, {c.SOLUTION_CELL: c.mutate(sol, n)}) for n in c.MUTANTS})
    subs.update({f"variant:{n}": submission(assignment, {c.SOLUTION_CELL: apply_edits(sol, n, m)})
                 for n, m in getattr(c, "VARIANTS", {}).items()})
    subs.update({f"alternative:{n}": submission(assignment, {c.SOLUTION_CELL: c.alternative(n)})
                 for n in c.ALTERNATIVES})
    return subs
