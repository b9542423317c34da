"""The hidden TeachingAttentionLM checks, proven both ways on a corpus of submissions."""
import pytest

from autograder import config
from autograder.diagnosis import BY_ID
from tests.corpus import attention_lm as corpus
from tests.corpus.checks import failed

CFG = config.load("attention_lm")
ALL = {c.id for c in CFG.checks}


def test_solution_gets_full_marks(lm_results):
    r = lm_results["solution"]
    assert r["score"] == r["max_score"] == CFG.max_score == 22 and failed(r) == set()


def test_unanswered_release_gets_zero(lm_results):
    r = lm_results["release"]
    assert r["score"] == 0 and failed(r) == ALL
    assert any("not answered yet" in c["message"] for c in r["checks"])


@pytest.mark.parametrize("name", sorted(corpus.MISTAKES))
def test_mistake_loses_exactly_its_checks(lm_results, name):
    r = lm_results[f"mistake:{name}"]
    assert failed(r) == corpus.MISTAKES[name].fails, corpus.MISTAKES[name].what
    assert r["score"] == CFG.max_score - sum(c.points for c in CFG.checks if c.id in corpus.MISTAKES[name].fails)


@pytest.mark.parametrize("name", sorted(corpus.ALTERNATIVES))
def test_correct_alternative_loses_nothing(lm_results, name):
    r = lm_results[f"alternative:{name}"]
    assert failed(r) == set(), [c["message"] for c in r["checks"] if not c["passed"]]


def test_every_check_is_proven_both_ways():
    assert set().union(*(m.fails for m in corpus.MISTAKES.values())) == ALL
    isolated = {next(iter(m.fails)) for m in corpus.MISTAKES.values() if len(m.fails) == 1}
    assert {"forward_matches_details", "reference_agreement"} <= isolated


def test_messages_name_the_problem(lm_results):
    msg = {c["id"]: c["message"] for c in lm_results["mistake:scaled_by_model_width"]["checks"]}
    assert "sqrt(d_k) = sqrt(4)" in msg["scaling"] and "division by 2.828" in msg["scaling"]
    msg = {c["id"]: c["message"] for c in lm_results["mistake:no_padding_mask"]["checks"]}
    assert "padded keys" in msg["padded_keys"]
    msg = {c["id"]: c["message"] for c in lm_results["mistake:cannot_train"]["checks"]}
    assert "tiny-batch overfit failed" in msg["tiny_batch_overfit"]


@pytest.mark.parametrize("name", sorted(corpus.MISTAKES))
def test_mistake_gets_its_named_diagnosis(name, lm_results):
    r = lm_results[f"mistake:{name}"]
    for c in r["checks"]:
        if c["passed"]:
            assert c["diagnosis"] is None
        else:
            assert c["diagnosis_id"] == name and c["diagnosis"].startswith(BY_ID[name].title), c


def test_correct_submissions_get_no_diagnosis(lm_results):
    for name, r in lm_results.items():
        if name.startswith("alternative:") or name == "solution":
            assert all(c["diagnosis"] is None for c in r["checks"])
