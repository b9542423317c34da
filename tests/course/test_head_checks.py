"""What only the Head checks have: their messages and verdicts on particular mistakes (what every assignment's
checks must do is tests/course/test_checks.py)."""
import pytest

from attnkit.engine import config
from tests.corpus_checks import failed

CFG = config.load("causal_head")
ALL = {c.id for c in CFG.checks}


def test_unanswered_release_gets_zero_with_a_plain_reason(head_results):
    r = head_results["release"]
    assert r["score"] == 0 and failed(r) == ALL
    assert all("NotImplementedError: not answered yet" in c["message"] for c in r["checks"])


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


def test_a_scale_that_equals_sqrt_d_head_only_at_4_loses_the_scaling_point():
    """Blind set 7: `d_head ** 1/2` (Python reads (d_head ** 1) / 2) and a constant 2 kept every point, since the
    checks' head has d_head = 4, where both are sqrt(d_head); the scaling check measures a d_head = 9 head too."""
    from attnkit.engine.judge import grade
    from tests.notebooks import solution_source, submission
    sol = solution_source("causal_head", "head")
    assert sol.count("k.shape[-1]**0.5") == 1
    for scale, named in (("2.0", "scale_fixed_2"), ("(k.shape[-1] ** 1/2)", "scale_precedence")):
        r = grade(submission("causal_head", {"head": sol.replace("k.shape[-1]**0.5", scale)}), "causal_head")
        assert failed(r) == {"scaling"}, (scale, failed(r))
        lost = next(c for c in r["checks"] if c["id"] == "scaling")
        assert "sqrt(9) = 3" in lost["message"] and lost["diagnosis_id"] == named, (scale, lost)


RETURN_LINE = "return A @ v "
SLIPS_SET7 = {   # blind set 7's unnamed slips, in the grammar since: the solution's lines edited, and the name
    "scale_precedence_unbracketed": [("k.shape[-1]**0.5", "k.shape[-1] ** 1/2")],   # scores / d ** 1/2, unbracketed
    "output_uses_transposed_weights": [(RETURN_LINE, "return (v.transpose(-2, -1) @ A).transpose(-2, -1) ")],
    "output_mixes_inputs": [(RETURN_LINE, "return A @ x ")],
    "diagonal_masked+nan_rows_zeroed": [("torch.tril(torch.ones(T_max, T_max))",
                                         "torch.tril(torch.ones(T_max, T_max), diagonal=-1)"),
                                        ("self.A = A.detach()", "A = torch.nan_to_num(A)\n        self.A = A.detach()")],
    "stale_keys_values": [("q, k, v = self.query(x), self.key(x), self.value(x)",
                           "q = self.query(x)\n        if getattr(self, 'kv', None) is None or "
                           "self.kv[0].shape[:2] != x.shape[:2]:\n            self.kv = (self.key(x), self.value(x))\n"
                           "        k, v = self.kv")],
}


@pytest.mark.parametrize("named", sorted(SLIPS_SET7))
def test_a_head_slip_of_blind_set_7_is_named(named):
    from attnkit.engine.judge import grade
    from tests.notebooks import solution_source, submission
    sol = solution_source("causal_head", "head")
    for old, new in SLIPS_SET7[named]:
        assert sol.count(old) == 1, old
        sol = sol.replace(old, new)
    r = grade(submission("causal_head", {"head": sol}), "causal_head")
    assert failed(r) and {c["diagnosis_id"] for c in r["checks"] if not c["passed"]} == {named}, r["checks"]


def test_a_float64_output_is_named_beside_a_scale_slip():
    """Blind set 7, m43: both slips, each on its own (the float64 output is seen on the module, the scale by
    reproduction)."""
    from attnkit.engine.judge import grade
    from tests.notebooks import solution_source, submission
    sol = solution_source("causal_head", "head").replace("k.shape[-1]**0.5", "k.shape[-1] ** 1/2")
    r = grade(submission("causal_head", {"head": sol.replace("return A @ v ", "return (A @ v).double() ")}),
              "causal_head")
    assert {c["diagnosis_id"] for c in r["checks"] if not c["passed"]} == {
        "scale_precedence_unbracketed+output_float64"}, r["checks"]


def test_a_softmax_renormalised_after_the_mask_loses_the_same_checks_for_every_student():
    """Blind set 7, m19: a softmax over the whole row, then * tril and renormalised. Its future reaches earlier
    outputs only in the last bits; the gradient check saw that on some draws (16 points) and not on others (18):
    now every draw loses the bitwise perturbation check alone."""
    from attnkit.engine.judge import grade
    from tests.notebooks import solution_source, submission
    sol = solution_source("causal_head", "head")
    old = ("        if self.causal:\n            scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))\n"
           "        A = F.softmax(scores, dim=-1)                           # (B, T, T)\n")
    assert sol.count(old) == 1
    new = ("        A = F.softmax(scores, dim=-1)\n        if self.causal:\n"
           "            A = A * self.tril[:T, :T]\n            A = A / A.sum(-1, keepdim=True)\n")
    nb = submission("causal_head", {"head": sol.replace(old, new)})
    graded = {student: grade(nb, "causal_head", student=student) for student in ("ada", "ben", "cy", "dee", "eve", "fay")}
    lost = {student: frozenset(failed(r)) for student, r in graded.items()}
    assert set(lost.values()) == {frozenset({"causality_perturbation"})}, lost
    # and every draw names it (after set 7's measurement): the future's gradient is rounding-small, not zero
    named = {c["diagnosis_id"] for r in graded.values() for c in r["checks"] if not c["passed"]}
    assert named == {"future_cancelled_in_graph"}, named


def test_keys_from_w_q_lose_the_same_checks_under_every_key(monkeypatch):
    """`attnkit check` found key_from_query (scores q_i . q_j) losing positive_weights under one grading key in three
    (20a651ce, drawn from --key-seed 3704309076): a row of its own scores underflowed to one weight left, where no
    ratio tells its scores from a pruned correct row. A zero where the correct weight is large is its own."""
    from attnkit import key_dependence as kd
    from attnkit.engine.judge import grade
    from attnkit.mutants import submissions
    nb = submissions("causal_head")["mistake:key_from_query"]
    for key in kd.draw_keys(3, 3704309076):
        monkeypatch.setenv("ATTNKIT_GRADING_KEY", key)
        assert failed(grade(nb, "causal_head")) == {"gradient_flow", "reference_agreement"}, key[:8]
