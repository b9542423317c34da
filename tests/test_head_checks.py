"""The hidden Head checks, proven both ways on a corpus of submissions."""
import pytest

from autograder import config
from autograder.diagnosis import BY_ID
from tests.corpus import causal_head as corpus
from tests.corpus.checks import failed, isolating

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


def test_every_check_is_isolated_by_a_mistake_that_loses_it_alone():
    alone = isolating(corpus.MISTAKES, ALL)
    assert {c for c, names in alone.items() if not names} == set(), alone


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


@pytest.mark.parametrize("name", sorted(corpus.MISTAKES))
def test_a_mistake_fits_its_own_diagnosis_and_no_other(head_results, name):
    """Never a confident wrong guess: no other catalogue entry's signature holds for this mutant's evidence."""
    assert head_results[f"mistake:{name}"]["diagnosis_matches"] == [name]


def test_variants_and_correct_heads_fit_only_what_they_should(head_results):
    for name, v in corpus.VARIANTS.items():
        assert head_results[f"variant:{name}"]["diagnosis_matches"] == ([v.diagnosis] if v.diagnosis else []), name
    for name, r in head_results.items():
        if name.startswith("alternative:") or name == "solution":
            assert r["diagnosis_matches"] == [] and all(c["diagnosis"] is None for c in r["checks"]), name


def _message(head_results, name, check):
    return next(c["message"] for c in head_results[name]["checks"] if c["id"] == check)


def test_row_sum_messages_name_what_was_measured(head_results):
    axis = _message(head_results, "mistake:softmax_wrong_axis", "simplex_rows")
    assert "query axis" in axis and "before the softmax" not in axis
    assert "after the softmax" in _message(head_results, "mistake:mask_after_softmax", "simplex_rows")
    assert "dim=-1" in _message(head_results, "mistake:softmax_over_batch", "simplex_rows")
    assert "masked (future) positions only" in _message(head_results, "mistake:softmax_over_batch", "simplex_rows")
    assert "row 0" in _message(head_results, "mistake:diagonal_masked", "simplex_rows")
    plain = _message(head_results, "mistake:stored_exponentials", "simplex_rows")
    assert "sum to 1" in plain and "softmax" not in plain          # it cannot tell why: it says what it saw


def test_every_length_is_judged_and_named(head_results):
    wrong_corner = _message(head_results, "mistake:mask_sliced_wrong", "short_sequence")
    assert "T = 2, 3, 4, 5" in wrong_corner and "slice" not in wrong_corner    # its mask is sliced
    assert "T = 1, 2, 3, 4, 5" in _message(head_results, "mistake:mask_not_sliced", "short_sequence")


def test_the_contract_includes_the_causal_default(head_results):
    r = head_results["mistake:causal_default_false"]
    assert failed(r) == {"interface"}
    assert "Head(d, d_head, T_max)" in _message(head_results, "mistake:causal_default_false", "interface")


def test_other_messages_follow_the_evidence(head_results):
    assert "received no gradient at all" in _message(head_results, "mistake:key_from_query", "gradient_flow")
    assert "does not require grad" in _message(head_results, "mistake:output_detached", "gradient_flow")
    assert "store the weights forward uses" in _message(head_results, "mistake:noncausal_stored_masked",
                                                        "noncausal_unmasked")
    assert "still masks the future" in _message(head_results, "mistake:causal_flag_ignored", "noncausal_unmasked")
    assert "although self.A is a convex combination" in _message(head_results, "mistake:residual_inside_head",
                                                                 "convex_hull")
    assert "no gradient reaches the input x" in _message(head_results, "mistake:input_detached", "causality_gradient")
