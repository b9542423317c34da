"""The LM's naming by reproduction, slot by slot: each slip of mutants.REPRODUCED is named by its id, and each near
miss beside it by nothing (autograder/attention_lm/grammar.py, observed.py).

The kit's own mutants run in this process (they are the kit's code, not a student's), through the driver's own
experiments on the judge's plan, so the grammar reads what a grading child would report; the checks' verdicts on
such submissions are tests/test_checks.py's business."""
import types

import pytest
import torch

from attnkit.mutants import apply_edits
from attnkit.toolkit import driver
from autograder.attention_lm import ASSIGNMENT, drive, mutants
from autograder.attention_lm.plan import make_plan
from tests.notebooks import solution_source

SKIPPED_OPS = ("overfit", "meta")     # training and the meta device: no slot reads them


@pytest.fixture(scope="module")
def plan():
    return make_plan(seed=7)


def _results(src: str, plan):
    """What the child would report for ``src`` (the solution cell, edited), experiment by experiment."""
    module = types.ModuleType("submission")
    exec(compile(mutants.PREAMBLE + src, "<mutant>", "exec"), module.__dict__)      # noqa: S102 - the kit's own code
    before = driver._contract
    driver.use_contract("TeachingAttentionLM", "class")
    out = {}
    try:
        for exp in plan["experiments"]:
            if exp["op"] in SKIPPED_OPS:
                continue
            state = {}
            try:
                meta, arrays = drive.run_experiment(module, exp, plan["tensors"], torch, state)
                out[exp["name"]] = ({"meta": meta}, arrays)
            except Exception as e:  # noqa: BLE001 - a mutant's error, reported as the child reports one
                out[exp["name"]] = ({"error": {"type": type(e).__name__, "stage": state.get("stage"),
                                               "raw": str(e)}}, {})
    finally:
        driver._contract = before
    return types.SimpleNamespace(results=out)


@pytest.mark.parametrize("name", sorted(mutants.REPRODUCED))
def test_a_reproduced_slip_is_named_and_its_near_miss_is_not(name, plan):
    m = mutants.REPRODUCED[name]
    src = apply_edits(solution_source("attention_lm", mutants.SOLUTION_CELL), name, m)
    named = [i for i, _ in ASSIGNMENT.reproduce(_results(src, plan), plan)]
    assert named == ([m.diagnosis] if m.diagnosis else []), (name, named)


def test_the_solution_is_named_nothing(plan):
    src = solution_source("attention_lm", mutants.SOLUTION_CELL)
    assert ASSIGNMENT.reproduce(_results(src, plan), plan) == []
