"""The catalogue of typical mistakes: what each looks like to the judge, and what to tell the student.

One entry per mistake. A signature reads *evidence* (facts the assignment's
evidence module measured from the submission's own arrays, e.g. "its attention
weights equal softmax(QK^T) without the 1/sqrt(d_k)"), never the list of failed
checks alone, so a diagnosis is only given when the submission's numbers match
that exact mistake. Anything else gets "no known pattern": no confident guess.
Hints say where to look, not what to type.
"""
from __future__ import annotations

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


def _weights(name):
    return lambda ev: name in ev.get("weights_match", ())


def _fact(name):
    return lambda ev: bool(ev.get(name))


H, L = "causal_head", "attention_lm"
CATALOGUE = [
    # ---- Head -------------------------------------------------------------------------------
    Mistake("mask_after_softmax", H, "Mask applied after the softmax",
            "Your weights are softmax(S) with the future zeroed afterwards, so rows no longer sum to 1 and "
            "the normaliser still sees the future.",
            "Mask the scores with -inf before the softmax.", _weights("mask_after_softmax")),
    Mistake("no_scale", H, "No 1/sqrt(d_k) scaling",
            "Your weights are softmax(QK^T): the scores were never scaled, so the softmax saturates as d_k grows "
            "(Lemma 4.5).", "Divide the scores by the square root of the head width.", _weights("no_scale")),
    Mistake("divide_by_dk", H, "Scores divided by d_k instead of sqrt(d_k)",
            "Your weights match softmax(QK^T / d_k): the temperature is too high.",
            "Lemma 4.5 needs the standard deviation, sqrt(d_k), not the variance.", _weights("divide_by_dk")),
    Mistake("scale_by_model_width", H, "Scaled by the model width instead of the head width",
            "Your weights match softmax(QK^T / sqrt(d)) with d the input width; the scores live in R^{d_head}.",
            "Which dimension do q and k share?", _weights("scale_by_model_width")),
    Mistake("softmax_wrong_axis", H, "Softmax over the wrong axis",
            "Your weights are normalised over queries (columns sum to 1), not over keys.",
            "Each query's row must be a distribution over the positions it reads: dim=-1.",
            _weights("softmax_wrong_axis")),
    Mistake("future_triangle", H, "Mask of the wrong triangle",
            "Your head masks the past and keeps the future (and the last row has nothing left).",
            "Position i may read j <= i: keep tril, mask what is above the diagonal.", _weights("future_triangle")),
    Mistake("diagonal_masked", H, "Diagonal masked out",
            "Your mask also hides each token from itself, so the first row has no allowed position and becomes NaN.",
            "The causal mask includes the diagonal (torch.tril without an offset).", _weights("diagonal_masked")),
    Mistake("mask_not_sliced", H, "Mask not sliced for T < T_max",
            "With a sequence shorter than T_max your mask has the wrong shape.",
            "Use the top-left T x T block of the buffer.", _fact("short_fails_on_shape")),
    Mistake("causal_flag_ignored", H, "The causal flag is ignored",
            "Your head masks the future even when constructed with causal=False.",
            "Apply the mask only when self.causal is true.", _fact("noncausal_is_masked")),
    Mistake("mask_never_applied", H, "The causal mask is never applied",
            "Your weights equal the unmasked softmax, so every position reads the future.",
            "Is the masked result assigned back, and is the branch taken when causal=True?",
            lambda ev: "mask_never_applied" in ev.get("weights_match", ()) and not ev.get("output_correct")),
    Mistake("mask_filled_with_zero", H, "Mask filled with 0 instead of -inf",
            "A score of 0 still gets weight exp(0) after the softmax, so the future keeps weight.",
            "What score makes exp(score) exactly zero?", _weights("mask_filled_with_zero")),
    Mistake("weights_stored_before_masking", H, "Weights stored before masking",
            "Your output is right but self.A holds the unmasked softmax, so the pictures show the future.",
            "Store the weights you actually multiply with V.",
            lambda ev: "mask_never_applied" in ev.get("weights_match", ()) and ev.get("output_correct")),
    Mistake("scores_detached", H, "Weights detached inside the computation",
            "No gradient reaches the query and key weights: the scores were detached before being used, so "
            "training could never change where the head looks.",
            "Detach only the copy you store in self.A.",
            lambda ev: ev.get("qk_without_gradient") and ev.get("weights_correct")),
    Mistake("mask_as_parameter", H, "Mask registered as a parameter",
            "Your `tril` is an nn.Parameter: the optimiser would train the mask.",
            "Non-trainable state belongs in register_buffer.", _fact("tril_is_parameter")),
    Mistake("A_not_detached", H, "self.A keeps the autograd graph",
            "The stored weights still require grad, which keeps the graph alive after every call.",
            "Store a detached copy.", _fact("A_requires_grad")),
    Mistake("biased_projections", H, "Biased projections",
            "Your query/key/value layers have a bias; the lecture's W_Q, W_K, W_V are plain matrices.",
            "Look at the arguments of nn.Linear.", _fact("biased_projection")),
    Mistake("dropout_on_weights", H, "Randomness in the head (dropout on the weights)",
            "Two calls on the same input gave different outputs.",
            "This head has no dropout: the same input must give the same output.", _fact("nondeterministic")),
    Mistake("running_mean", H, "Content-blind running mean",
            "Your weights are uniform over the allowed positions, whatever the content: the scores are not "
            "computed from queries and keys (the W_Q = W_K = 0 case of 4.5).",
            "The scores must come from q and k.", _weights("running_mean")),
    Mistake("key_from_query", H, "Key computed with the query projection",
            "Your weights match softmax(QQ^T): the keys came from self.query.", "Check which layer makes k.",
            _weights("key_from_query")),
    Mistake("scores_transposed", H, "Scores transposed",
            "Your weights match softmax(KQ^T): row i holds how keys see query i.",
            "Row i of S must be q_i against every key.", _weights("scores_transposed")),
    Mistake("banned_fused_call", H, "A fused attention call",
            "The head uses F.scaled_dot_product_attention or nn.MultiheadAttention, which this assignment "
            "builds by hand.", "Write the scores, mask and softmax yourself.", _fact("uses_fused_attention")),
    # ---- TeachingAttentionLM -----------------------------------------------------------------
    Mistake("no_padding_mask", L, "Missing padding mask",
            "Real tokens give weight to padded keys, so the left padding leaks into predictions.",
            "Mask keys whose id is pad_id for queries that are real tokens.", _weights("no_padding_mask")),
    Mistake("padding_mask_nan_rows", L, "Padding mask that produces NaN rows",
            "Padded keys are masked for every query, so a padded query at the start has no allowed key and "
            "its row becomes NaN.", "Mask padded keys only for real queries.", _weights("padding_mask_nan_rows")),
    Mistake("no_residual", L, "Missing residual",
            "Your contextual rows are the attention update alone; the token rows X were never added back.",
            "X' = X + update.", _fact("no_residual")),
    Mistake("no_position_rows", L, "Missing position rows",
            "Your X has no position rows, so the model cannot tell word order (Cor 6.2 does not break).",
            "Add the learned position row to each token row.", _fact("no_position_rows")),
    Mistake("first_position", L, "Logits read from the first position",
            "forward_details()['logits'] is the first position's prediction, not the last's.",
            "The window predicts the token after its last slot.", _fact("first_position")),
    Mistake("no_relu", L, "Missing ReLU", "Your hidden layer is linear: the ReLU is missing.",
            "hidden = ReLU(hidden_layer(X')).", _fact("no_relu")),
    Mistake("future_mask_missing_in_details", L, "Future mask missing in forward_details",
            "forward_details lets queries read future keys (only padding is masked).",
            "Combine the causal mask with the padding mask.", _weights("future_mask_missing_in_details")),
    Mistake("forward_ignores_padding", L, "forward and forward_details disagree on padded input",
            "Your forward() lets the last query read padded keys while forward_details() does not.",
            "Apply the same padding mask in both.", _fact("forward_ignores_padding")),
    Mistake("scaled_by_model_width", L, "Scaled by sqrt(d_model) instead of sqrt(d_k)",
            "Your scores are divided by the model width; this only shows when d_k != d_model.",
            "Which width do Q and K share?", _weights("scaled_by_model_width")),
    Mistake("no_scaling", L, "No 1/sqrt(d_k) scaling", "Your scores are QK^T without scaling.",
            "Divide by the square root of d_k.", _weights("no_scaling")),
    Mistake("softmax_over_queries", L, "Softmax over the query axis",
            "Your weights are normalised over queries rather than keys.", "Each row is one query: dim=-1.",
            _weights("softmax_over_queries")),
    Mistake("cannot_train", L, "A forward that cannot train",
            "No gradient from the loss reaches any parameter: the output is detached from the model.",
            "Remove detach()/no_grad from the path to the logits.", _fact("no_gradient_anywhere")),
    Mistake("biased_query", L, "Bias on an attention projection",
            "W_Q, W_K, W_V or W_O has a bias, which changes the parameter count.",
            "The projections are nn.Linear(..., bias=False).", _fact("biased_attention_projection")),
    Mistake("unused_W_O", L, "W_O never used",
            "The messages are added to X without the output projection W_O (it only runs when d_v == d_model).",
            "update = W_O(messages).", _fact("W_O_unused")),
    Mistake("library_attention", L, "A library attention call",
            "The model runs torch's attention (F.scaled_dot_product_attention, F.multi_head_attention_forward or "
            "nn.MultiheadAttention) instead of the head this assignment builds by hand.",
            "Write the scores, the causal and padding masks and the softmax yourself.", _fact("uses_fused_attention")),
]
BY_ID = {m.id: m for m in CATALOGUE}
assert len(BY_ID) == len(CATALOGUE), "duplicate mistake ids"


def diagnose(assignment: str, evidence: dict) -> Mistake | None:
    """The first catalogue entry of ``assignment`` whose signature holds, if any."""
    for m in CATALOGUE:
        if m.assignment == assignment:
            try:
                if m.signature(evidence):
                    return m
            except Exception:  # noqa: BLE001 - missing evidence is no match
                continue
    return None
