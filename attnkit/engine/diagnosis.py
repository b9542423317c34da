"""The catalogue of typical mistakes: what each looks like to the judge, and what to tell the student.

Each assignment's plug-in lists its own (``autograder/<A>/mistakes.py``); this module is the engine.

One entry per mistake. A signature reads *evidence* (facts the assignment's
evidence module measured from the submission's own arrays, e.g. "its attention
weights equal softmax(QK^T) without the 1/sqrt(d_k)"), never the list of failed
checks alone, so a diagnosis is only given when the submission's numbers match
that exact mistake. Anything else gets "no known pattern": no confident guess.
Hints say where to look, not what to type.
"""
from __future__ import annotations

import re

from attnkit.engine import registry
from attnkit.engine.results import at_line as _at
from attnkit.toolkit.plugin import Mistake

NO_PATTERN = "no known pattern"


def reproduced_text(sentence: str) -> str:
    """A reproduced slip as the page shows it: its sentence (the kit's fixed words and the grammar's parameters,
    never the student's), which says how it was found, as one paragraph."""
    code = re.match(r"\w+[.(\[]", sentence)      # a sentence that opens with code (self.value ...) keeps its case
    return f"{sentence if code else sentence[:1].upper() + sentence[1:]}."


def joined(texts: list[str]) -> str:
    """One diagnosis naming every slip found: a single one as it is, several numbered in one paragraph."""
    if len(texts) == 1:
        return texts[0]
    count = {2: "Two", 3: "Three"}.get(len(texts), str(len(texts)))
    return f"{count} slips, each found on its own: " + " ".join(f"({n}) {t}" for n, t in enumerate(texts, 1))


def measured(message: str) -> str:
    """What a page says when nothing reproduces the submission: no name, and what the first failed check measured
    (the check's own sentence, the kit's words and numbers)."""
    return f"{NO_PATTERN}: no single slip the judge tried reproduces your numbers. What was measured: {message}"


# (the line's code, the error's sentence, what to add): PyTorch facts a line that raised makes relevant, said as
# facts about the line, not as its cause
LINE_HINTS = (
    (r"\.T\b", r"matrix product|sizes do not match",
     "; on a tensor of three or more dimensions `.T` reverses every axis (`.transpose(-2, -1)` swaps the last two)"),
    (r"\.view\(", r"view or reshape", "; `.view` needs the new shape to hold exactly the elements of the old one"),
    (r"[Ee]mbedding\(|\bemb\w*\(", r"IndexError: an index out of range",
     "; an nn.Embedding raises this when an index is not below its number of rows: check what indexes it"),
    (r".", r"tensors of different dtypes",         # blind set 8: a NumPy mask (float64) met the float32 scores
     "; a tensor your code builds has another dtype than the one it meets (NumPy makes float64 where the model is "
     "float32; masked_fill wants a bool mask): check the dtype of each tensor you build"),
)


RAISED = "raised_"          # the id of a diagnosis that is one raised error: RAISED + the exception's type


def raised_id(kind: str) -> str:
    return RAISED + (kind if kind.isidentifier() else "own_class")


def title(mistake_id: str, known: dict) -> str:
    """A diagnosis id as a TA reads it in a list: the catalogue entry's title, "raised NameError" for one error."""
    if mistake_id in known:
        return known[mistake_id].title
    return f"raised {mistake_id[len(RAISED):]}" if mistake_id.startswith(RAISED) else mistake_id


def stopped(error: str, line: str, n: int = 0, lost: int = 0) -> str:
    """What a page says when the failed checks (``n`` of the ``lost``, when not all) failed on one error the
    submission raised: that error, where, and the line's own text (the student's, written before any input
    existed), and nothing guessed beyond it."""
    hint = next((h for code, said, h in LINE_HINTS if re.search(code, line) and re.search(said, error)), "")
    which = f"{n} of the {lost} checks you lost" if n < lost else "Every check you lost"
    return f"{which} stopped on the same error, so they measured nothing else: {error}{_at(line)}{hint}."


def where_it_failed(text: str, error: str, line: str) -> str:
    """A catalogue entry's text with the error that stopped its failing runs, and that error's line, after it
    (``Mistake.quotes_error``): what the evidence named, then where in the student's code it showed."""
    return f"{text} Where it failed: {error}{_at(line)}."


def catalogue(assignment: str | None = None) -> list[Mistake]:
    """The mistakes of ``assignment`` (every assignment's when None), in catalogue order: each assignment's
    plug-in lists them (``Assignment.mistakes``)."""
    return [m for a in ([assignment] if assignment else registry.names()) for m in registry.get(a).plugin().mistakes]


class DuplicateMistake(ValueError):
    """Two entries of one assignment's catalogue share an id: one sentence naming it."""


def by_id(assignment: str | None = None) -> dict[str, Mistake]:
    """``assignment``'s catalogue by id; with None, every assignment's by ``<assignment>/<id>``: ids are an
    assignment's own, so two assignments may use the same one and only a repeat within one catalogue is refused."""
    found = {}
    for a in ([assignment] if assignment else registry.names()):
        for m in catalogue(a):
            key = m.id if assignment else f"{a}/{m.id}"
            if key in found:
                raise DuplicateMistake(f"mistake id {m.id!r} appears twice in {a}'s catalogue "
                                       f"(autograder/{a}/mistakes.py): give each entry an id of its own")
            found[key] = m
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
