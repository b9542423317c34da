"""What only the TeachingAttentionLM checks have: their messages, and the verdicts on other spellings of a
mistake (what every assignment's checks must do is tests/course/test_checks.py)."""
import re

import pytest

from attnkit.engine.judge import grade
from attnkit.mutants import apply_edits
from autograder.attention_lm import mutants
from tests.corpus_checks import failed
from tests.notebooks import solution_source, submission


def _messages(lm_results, name):
    return {c["id"]: c["message"] for c in lm_results[name]["checks"] if not c["passed"]}


def test_a_model_that_works_only_on_full_windows_hears_which_lengths_fail(spelling_results):
    lm_results = spelling_results
    for name in ("mistake:full_length_only", "spelling:future_mask_sized_by_context_len"):
        for check, text in _messages(lm_results, name).items():
            assert re.search(r"\(fails at window lengths [1-5, ]+ of 1\.\.6, holds at [0-9, ]*6\)$", text), (check, text)


def test_row_sum_messages_name_what_was_measured(lm_results):
    nan = _messages(lm_results, "mistake:padding_mask_nan_rows")["rows_sum_to_one"]
    assert "NaN" in nan and "padded queries" in nan and "masked (-inf)" in nan
    assert "from the future" not in " ".join(_messages(lm_results, "mistake:padding_mask_nan_rows").values())
    assert "zeroed afterwards" in _messages(lm_results, "mistake:lm_mask_after_softmax")["rows_sum_to_one"]
    axis = _messages(lm_results, "mistake:softmax_over_queries")["rows_sum_to_one"]
    assert "columns sum to 1" in axis and "zeroed afterwards" not in axis


def test_gradient_and_contract_messages_name_what_was_measured(spelling_results):
    lm_results = spelling_results
    first = _messages(lm_results, "mistake:forward_reads_first_position")["finite_gradients"]
    assert "W_Q.weight and W_K.weight are exactly zero" in first
    assert "no gradient reaches W_Q.weight" in _messages(lm_results, "mistake:attention_detached")["finite_gradients"]
    defaults = _messages(lm_results, "mistake:wrong_defaults")["parameter_count"]
    assert "TeachingAttentionLM(1500, 12)" in defaults and "W_Q.weight of shape (32, 48) (expected (48, 48))" in defaults
    assert "default pad_id is 0" in _messages(lm_results, "spelling:default_pad_id_one")["parameter_count"]


def test_messages_name_the_problem(lm_results):
    msg = {c["id"]: c["message"] for c in lm_results["mistake:scaled_by_model_width"]["checks"]}
    assert "sqrt(d_k) = sqrt(9)" in msg["scaling"] and "division by 2.828" in msg["scaling"]
    msg = {c["id"]: c["message"] for c in lm_results["mistake:no_padding_mask"]["checks"]}
    assert "padded keys" in msg["padded_keys"]
    msg = {c["id"]: c["message"] for c in lm_results["mistake:cannot_train"]["checks"]}
    assert "tiny-batch overfit failed" in msg["tiny_batch_overfit"]


@pytest.fixture(scope="module")
def spelling_results(lm_results):
    """The corpus results, with the SPELLINGS (other ways of writing a catalogued mistake) graded too."""
    sol = solution_source("attention_lm", mutants.SOLUTION_CELL)
    graded = {f"spelling:{n}": grade(submission("attention_lm", {mutants.SOLUTION_CELL: apply_edits(sol, n, m)}),
                                     "attention_lm") for n, m in mutants.SPELLINGS.items()}
    return {**lm_results, **graded}


@pytest.mark.parametrize("name", sorted(mutants.SPELLINGS))
def test_another_spelling_of_a_mistake_gets_the_same_verdict(spelling_results, name):
    m, r = mutants.SPELLINGS[name], spelling_results[f"spelling:{name}"]
    assert failed(r) == m.fails, m.what
    assert {c["diagnosis_id"] for c in r["checks"] if not c["passed"]} == {m.diagnosis}


def test_messages_made_with_W_O_before_the_weighting_lose_reference_agreement_alone():
    """weights @ W_O(V) gives the right contextual rows by linearity, but the returned messages are not weights V:
    they have width d_model, not d_v (blind set 6 kept every point with it). Only the agreement check sees it."""
    source = solution_source("attention_lm", "lm")
    wrong = source.replace("messages = weights @ V ", "messages = weights @ self.W_O(V) ", 1).replace(
        "updates = self.W_O(messages)", "updates = messages", 1)
    assert wrong != source and "self.W_O(V)" in wrong and "updates = messages " in wrong
    r = grade(submission("attention_lm", {"lm": wrong}), "attention_lm")
    assert failed(r) == {"reference_agreement"}, r["checks"]
    assert "forward_details()['messages']" in next(c["message"] for c in r["checks"] if not c["passed"])


def test_an_mlp_that_reads_X_is_named_so_and_not_W_O_unused():
    """hidden = ReLU(hidden_layer(X)) leaves W_O without a gradient, as skipping W_O does; blind set 6 was told
    'W_O never used', a confident wrong name. The judge now names what reproduces the numbers."""
    m = mutants.REPRODUCED["mlp_reads_X"]
    r = grade(submission("attention_lm", {"lm": apply_edits(solution_source("attention_lm", "lm"), "mlp_reads_X", m)}),
              "attention_lm")
    lost = [c for c in r["checks"] if not c["passed"]]
    assert lost and {c["diagnosis_id"] for c in lost} == {"mlp_reads_X"}, [c["diagnosis"] for c in lost]
    assert "unused_W_O" not in r["diagnosis_matches"]
