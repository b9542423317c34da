"""Corpora of submissions: typical mistakes (as edits of a solution cell) and correct alternatives."""
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    what: str
    edits: tuple          # (old, new) substring replacements applied to the solution cell
    fails: frozenset      # exactly the checks this mistake must fail
    diagnosis: str | None = None     # a variant's named mistake (a MISTAKES entry's is its own name)


def mistake(what, edits, *fails) -> Mistake:
    return Mistake(what, tuple(edits), frozenset(fails))


def variant(what, diagnosis, edits, *fails) -> Mistake:
    """Another submission of a mistake already in MISTAKES (e.g. the same fused call, obfuscated): it must
    lose exactly ``fails`` and be named ``diagnosis`` (None: the judge may only say "no known pattern")."""
    return Mistake(what, tuple(edits), frozenset(fails), diagnosis)


def apply_edits(solution_src: str, name: str, m: Mistake) -> str:
    src = solution_src
    for old, new in m.edits:
        if old not in src:
            raise ValueError(f"mistake {name!r}: {old!r} not in the solution cell")
        src = src.replace(old, new)
    return src


def module(assignment: str):
    """The corpus of one assignment: MISTAKES, ALTERNATIVES, SOLUTION_CELL, mutate(), alternative()."""
    return importlib.import_module(f"tests.corpus.{assignment}")


def submissions(assignment: str) -> dict:
    """name -> notebook: the solution, the unanswered release, every mistake, every variant of one
    (``variant:NAME``) and every alternative."""
    from tests.notebooks import solution_source, submission
    c = module(assignment)
    sol = solution_source(assignment, c.SOLUTION_CELL)
    subs = {"solution": submission(assignment, {c.SOLUTION_CELL: sol}), "release": submission(assignment, {})}
    subs.update({f"mistake:{n}": submission(assignment, {c.SOLUTION_CELL: c.mutate(sol, n)}) for n in c.MISTAKES})
    subs.update({f"variant:{n}": submission(assignment, {c.SOLUTION_CELL: apply_edits(sol, n, m)})
                 for n, m in getattr(c, "VARIANTS", {}).items()})
    subs.update({f"alternative:{n}": submission(assignment, {c.SOLUTION_CELL: c.alternative(n)})
                 for n in c.ALTERNATIVES})
    return subs
