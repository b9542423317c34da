"""The hidden Head checks, proven both ways on a corpus of submissions."""
import pytest

from autograder import config
from autograder.diagnosis import BY_ID
from tests.corpus import causal_head as corpus
from tests.corpus.checks import failed

CFG = config.load("causal_head")
ALL = {c.id for c in CFG.checks}


def test_solution_gets_full_marks(head_results):
    r = head_results["solution"]
    assert r["score"] == r["max_score"] == CFG.max_score > 0
    assert r["error"] is None and failed(r) == set()


def test_unanswered_release_gets_zero_with_a_plain_reason(head_results):
    r = head_results["release"]
    assert r["score"] == 0 and failed(r) == ALL
    assert all("NotImplementedError: not answered yet" in c["message"] for c in r["checks"])


@pytest.mark.parametrize("name", sorted(corpus.MISTAKES))
def test_mistake_loses_exactly_its_checks(head_results, name):
    r = head_results[f"mistake:{name}"]
    assert failed(r) == corpus.MISTAKES[name].fails, corpus.MISTAKES[name].what
    lost = sum(c.points for c in CFG.checks if c.id in corpus.MISTAKES[name].fails)
    assert r["score"] == CFG.max_score - lost


@pytest.mark.parametrize("name", sorted(corpus.ALTERNATIVES))
def test_correct_alternative_loses_nothing(head_results, name):
    r = head_results[f"alternative:{name}"]
    assert failed(r) == set(), [c["message"] for c in r["checks"] if not c["passed"]]


def test_every_check_is_proven_both_ways(head_results):
    """Each check passes for the solution and is the (or a) failing check of some mistake."""
    caught = set().union(*(m.fails for m in corpus.MISTAKES.values()))
    assert caught == ALL
    isolated = {next(iter(m.fails)) for m in corpus.MISTAKES.values() if len(m.fails) == 1}
    assert {"short_sequence", "gradient_flow", "mask_buffer", "interface"} <= isolated


def test_masking_after_softmax_loses_the_row_sum_points(head_results):
    r = head_results["mistake:mask_after_softmax"]
    row = next(c for c in r["checks"] if c["id"] == "simplex_rows")
    assert not row["passed"] and row["points"] == 0 and "sum to 1" in row["message"]


def test_failure_messages_say_what_is_wrong(head_results):
    msg = {c["id"]: c["message"] for c in head_results["mistake:no_scale"]["checks"]}
    assert "no scaling at all" in msg["scaling"] and "sqrt(d_head)" in msg["scaling"]
    msg = {c["id"]: c["message"] for c in head_results["mistake:divide_by_dk"]["checks"]}
    assert "division by 4" in msg["scaling"]
    msg = {c["id"]: c["message"] for c in head_results["mistake:mask_not_sliced"]["checks"]}
    assert "tril[:T, :T]" in msg["short_sequence"]


def test_points_come_from_grading_config(head_results):
    r = head_results["solution"]
    assert {c["id"]: c["max_points"] for c in r["checks"]} == {c.id: c.points for c in CFG.checks}


@pytest.mark.parametrize("name", sorted(corpus.MISTAKES))
def test_mistake_gets_its_named_diagnosis(name, head_results):
    r = head_results[f"mistake:{name}"]
    for c in r["checks"]:
        if c["passed"]:
            assert c["diagnosis"] is None
        else:
            assert c["diagnosis_id"] == name and c["diagnosis"].startswith(BY_ID[name].title), c


def test_correct_submissions_get_no_diagnosis(head_results):
    for name, r in head_results.items():
        if name.startswith("alternative:") or name == "solution":
            assert all(c["diagnosis"] is None for c in r["checks"])
