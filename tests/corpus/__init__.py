"""Corpora of submissions: typical mistakes (as edits of a solution cell) and correct alternatives."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    what: str
    edits: tuple          # (old, new) substring replacements applied to the solution cell
    fails: frozenset      # exactly the checks this mistake must fail


def mistake(what, edits, *fails) -> Mistake:
    return Mistake(what, tuple(edits), frozenset(fails))


def apply_edits(solution_src: str, name: str, m: Mistake) -> str:
    src = solution_src
    for old, new in m.edits:
        if old not in src:
            raise ValueError(f"mistake {name!r}: {old!r} not in the solution cell")
        src = src.replace(old, new)
    return src
