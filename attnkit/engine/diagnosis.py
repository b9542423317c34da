"""The catalogue of typical mistakes: what each looks like to the judge, and what to tell the student.

Each assignment lists its own in ``autograder/<A>/mistakes.py``; this module is the engine.

One entry per mistake. A signature reads *evidence* (facts the assignment's
evidence module measured from the submission's own arrays, e.g. "its attention
weights equal softmax(QK^T) without the 1/sqrt(d_k)"), never the list of failed
checks alone, so a diagnosis is only given when the submission's numbers match
that exact mistake. Anything else gets "no known pattern": no confident guess.
Hints say where to look, not what to type.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

NO_PATTERN = "no known pattern"


@dataclass(frozen=True)
class Mistake:
    id: str
    assignment: str
    title: str
    explanation: str
    hint: str
    signature: Callable[[dict], bool]

    def text(self) -> str:
        return f"{self.title}. {self.explanation} Hint: {self.hint}"


# Signatures the catalogues build theirs from.
def weights(name):
    return lambda ev: name in ev.get("weights_match", ())


def fact(name):
    return lambda ev: bool(ev.get(name))


def weights_and_output(name, output_correct: bool):
    """Weights of mistake ``name``, and an output that is (or is not) the correct one: the same wrong weights
    tell apart a head that computes with them from one that only stores them."""
    return lambda ev: weights(name)(ev) and bool(ev.get("output_correct")) == output_correct


def catalogue(assignment: str | None = None) -> list[Mistake]:
    """The mistakes of ``assignment`` (every assignment's when None), in catalogue order: each assignment's
    own ``mistakes.py`` lists them (``MISTAKES``)."""
    from attnkit.engine import registry
    return [m for a in ([assignment] if assignment else registry.names())
            for m in importlib.import_module(f"autograder.{a}.mistakes").MISTAKES]


def by_id() -> dict[str, Mistake]:
    every = catalogue()
    found = {m.id: m for m in every}
    assert len(found) == len(every), "duplicate mistake ids"
    return found


def matches(assignment: str, evidence: dict) -> list[Mistake]:
    """Every catalogue entry of ``assignment`` whose signature holds, in catalogue order. More than one means
    the evidence does not single a mistake out: the corpus tests require exactly one for each mutant."""
    found = []
    for m in catalogue(assignment):
        try:
            if m.signature(evidence):
                found.append(m)
        except Exception:  # noqa: BLE001 - missing evidence is no match
            continue
    return found


def diagnose(assignment: str, evidence: dict) -> Mistake | None:
    """The first catalogue entry of ``assignment`` whose signature holds, if any."""
    found = matches(assignment, evidence)
    return found[0] if found else None
