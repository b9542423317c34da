"""The assignment plug-in: what a course's ``autograder/<A>/`` gives the judge, and all the judge calls.

An assignment's package exports one object, ``ASSIGNMENT``, an instance of a subclass of ``Assignment``
(``attnkit new`` scaffolds one; docs/writing-an-assignment.md walks through it). The judge, for one submission:

    plan = ASSIGNMENT.make_plan(seed)             # once per course key (cached): inputs and experiments
    # the grading child runs every plan["experiments"] entry with the assignment's drive.py
    ASSIGNMENT.checks[check_id](results, plan)    # for each [[checks]] id of manifest.toml; CheckFailed fails it
    ASSIGNMENT.evidence(results, plan)            # facts the mistakes' signatures read (only when one failed)
    ASSIGNMENT.mistakes                           # the catalogue: Mistake entries, in order
    ASSIGNMENT.attention_pattern(results, plan)   # the feedback's picture (optional)

``results`` is the engine's ``Results`` (``results.get(name)`` hands a check one experiment's arrays, or fails it
with a sentence saying why there are none). The driver, ``drive.py`` beside the package, runs in the grading
child and defines ``run_experiment(module, experiment, tensors, torch, state) -> (meta, arrays)``: ``meta`` a
JSON-able dict, ``arrays`` a dict of name -> tensor (attnkit/toolkit/driver.py holds its helpers). The corpus the
kit tests the checks with, ``mutants.py``, is built with attnkit/toolkit/corpus.py. ``attnkit check A`` checks
this shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypedDict

if TYPE_CHECKING:            # the registry reads this module in every command: torch is imported where it runs
    import torch

from attnkit.toolkit.require import CheckFailed  # noqa: F401 - what a check raises (via require)


class Experiment(TypedDict, total=False):
    """One run the grading child makes (sent to it as JSON): ``name`` (unique in the plan; ``results.get``'s
    key) and whatever the assignment's driver reads (its kind, the tensors it uses, ...)."""
    name: str


class Plan(TypedDict, total=False):
    """What one course key gives the judge: ``tensors`` (sent to the child), ``experiments`` (run in order),
    ``modules`` (helper modules the child may import by name: source text), and anything else the checks
    read (expected values stay in the judge's process, never in the child's)."""
    tensors: dict[str, torch.Tensor]
    experiments: list[Experiment]
    modules: dict[str, str]


Check = Callable[[Any, Plan], None]
"""A check: ``check(results, plan)`` returns when the property holds and raises CheckFailed (``require``) with a
sentence for the student when it does not."""


@dataclass(frozen=True)
class Mistake:
    """One catalogue entry: a typical mistake, how its evidence looks (``signature``, over the dict
    ``Assignment.evidence`` returns) and what the student is told. Named only when the signature holds."""
    id: str
    assignment: str
    title: str
    explanation: str
    hint: str
    signature: Callable[[dict], bool]
    # Seen on the module itself (its layers, buffers, flags, another call's behaviour) rather than in the numbers
    # of its attention: such a slip is named beside whatever else reproduces the rest, so a notebook with two
    # slips hears of both. Leave False for an entry whose evidence another slip could also produce.
    beside: bool = False
    # The evidence says what was wrong but not where (a size kept from context_len: the positions or the mask?):
    # the one error that stopped the failing runs, and its line, is said after the text when there is one.
    quotes_error: bool = False

    def text(self) -> str:
        return f"{self.title}. {self.explanation} Hint: {self.hint}"


# Signatures a catalogue builds its entries from. Each reads the evidence key it names, which the assignment's
# ``evidence`` must produce for the signature to ever hold (a key it never sets is no match, never an error).
def weights(name, key: str = "weights_match"):
    """Mistake ``name`` is among ``ev[key]``: the names whose weights the evidence found the submission's equal to."""
    return lambda ev: name in ev.get(key, ())


def fact(name):
    """``ev[name]`` is true."""
    return lambda ev: bool(ev.get(name))


def weights_and_output(name, output_correct: bool, key: str = "weights_match", output: str = "output_correct"):
    """Weights of mistake ``name`` (``ev[key]``), and an output that is (or is not) the correct one (``ev[output]``):
    the same wrong weights tell apart a module that computes with them from one that only stores them."""
    return lambda ev: weights(name, key)(ev) and bool(ev.get(output)) == output_correct


class Assignment:
    """Base of an assignment's plug-in. A subclass sets ``checks`` and ``mistakes`` and defines ``make_plan``
    and ``evidence``; ``attention_pattern`` is optional."""
    checks: Mapping[str, Check] = {}          # check id (manifest.toml's [[checks]] id) -> the check
    mistakes: Sequence[Mistake] = ()          # the catalogue, in the order it is matched

    def make_plan(self, seed: int) -> Plan:
        raise NotImplementedError

    def evidence(self, results, plan: Plan) -> dict:
        """Facts measured from the submission's own arrays, which the mistakes' signatures read."""
        return {}

    def reproduce(self, results, plan: Plan) -> list[tuple[str, str]]:
        """Edits of the reference that reproduce the submission's numbers, as (id, sentence) pairs of the kit's own
        text, tried when no catalogue entry fits; none (the default) leaves the measured sentence."""
        return []

    def attention_pattern(self, results, plan: Plan) -> dict | None:
        """The feedback's picture of the student's attention beside the expected one, or None."""
        return None
