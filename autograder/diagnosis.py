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


def _weights_and_output(name, output_correct: bool):
    """Weights of mistake ``name``, and an output that is (or is not) the correct one: the same wrong weights
    tell apart a head that computes with them from one that only stores them."""
    return lambda ev: _weights(name)(ev) and bool(ev.get("output_correct")) == output_correct


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
            _weights_and_output("mask_never_applied", False)),
    Mistake("mask_filled_with_zero", H, "Mask filled with 0 instead of -inf",
            "A score of 0 still gets weight exp(0) after the softmax, so the future keeps weight.",
            "What score makes exp(score) exactly zero?", _weights("mask_filled_with_zero")),
    Mistake("weights_stored_before_masking", H, "Weights stored before masking",
            "Your output is right but self.A holds the unmasked softmax, so the pictures show the future.",
            "Store the weights you actually multiply with V.",
            _weights_and_output("mask_never_applied", True)),
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
    # Walking the seed's Head line by line: its defaults, each operand and layer, the mask's buffer,
    # fill and slice, the softmax's axis, what is stored and what is returned.
    Mistake("causal_default_false", H, "The causal flag defaults to False",
            "Built as the lecture builds it, Head(d, d_head, T_max), your head is not causal: the contract's "
            "default is causal=True, so every later step that relies on it would read the future.",
            "Look at the default value of `causal` in __init__'s signature.", _fact("default_not_causal")),
    Mistake("value_from_wrong_layer", H, "Values computed with the wrong layer",
            "Your weights are right, but the output is those weights times x W_Q^T or x W_K^T: v does not come "
            "from self.value.", "Check which layer makes v.",
            lambda ev: any(r[:2] == ("query", "key") for r in ev.get("roles_match", ()))),
    Mistake("projections_swapped", H, "Query, key and value layers used in the wrong roles",
            "Your output and weights match a head whose q, k and v come from other layers than self.query, "
            "self.key and self.value respectively.", "q = self.query(x), k = self.key(x), v = self.value(x).",
            lambda ev: any(r[:2] not in (("query", "key"), ("query", "query"), ("key", "query"))
                           for r in ev.get("roles_match", ()))),
    Mistake("mask_fill_positive", H, "Mask filled with +1e9 (the wrong sign)",
            "Your weights match a softmax whose future scores were set to a huge positive number, so each query "
            "puts all its weight on the future.", "exp(score) must vanish where the mask is: a large negative "
            "number, or -inf.", _weights("mask_fill_positive")),
    Mistake("softmax_over_batch", H, "Softmax over the batch axis",
            "Your weights are normalised across the examples of the batch (dim 0), not over the keys: "
            "F.softmax without dim= picks dim 0 for a 3-D tensor.",
            "Name the axis: F.softmax(scores, dim=-1).", _weights("softmax_over_batch")),
    Mistake("scale_multiplied", H, "Scores multiplied by sqrt(d_k) instead of divided",
            "Your weights match softmax(QK^T * sqrt(d_k)): the temperature went the wrong way and the softmax "
            "saturates.", "Compare k.shape[-1]**0.5 with k.shape[-1]**-0.5.", _weights("scale_multiplied")),
    Mistake("mask_upper_triangle", H, "The mask is upper-triangular (torch.triu)",
            "Your head keeps each position and its future and masks the past: the buffer holds torch.triu.",
            "The causal mask keeps j <= i: torch.tril.", _weights("mask_upper_triangle")),
    Mistake("softmax_not_normalised", H, "Exponentials never normalised",
            "Your weights are exp(scores) without dividing by their row sum, so rows do not sum to 1.",
            "Divide each row by its sum, or use F.softmax(..., dim=-1).",
            _weights_and_output("softmax_not_normalised", False)),
    Mistake("stored_exponentials", H, "self.A holds the exponentials, not the weights",
            "Your output is right, but self.A is exp(scores) before the division by the row sum.",
            "Store the normalised weights, the ones multiplied with v.", _fact("stored_exponentials")),
    Mistake("residual_inside_head", H, "A residual added inside the head",
            "Your weights are right, but forward returns A @ v + v: the head adds its own values back, so its "
            "output leaves the convex hull of the values (the residual belongs to the block around the head).",
            "forward returns A @ v alone.", _fact("residual_inside_head")),
    Mistake("mask_band", H, "A local window instead of the causal mask",
            "Your head also masks positions more than a few steps back: every allowed position (j <= i) must keep "
            "a positive weight.", "The causal mask hides only j > i: torch.tril without a lower bound.",
            lambda ev: any(n.startswith("mask_band_") for n in ev.get("weights_match", ()))),
    Mistake("noncausal_zero_fill", H, "With causal=False the future is filled with 0",
            "Your causal head is right, but with causal=False the future scores are set to 0 rather than left "
            "alone: a score of 0 still replaces the real one, so the head is neither masked nor equivariant.",
            "With causal=False, do not touch the scores at all.", _fact("noncausal_zero_fill")),
    Mistake("noncausal_stored_masked", H, "With causal=False self.A is masked for storage",
            "Your non-causal output is right, but the weights you store have the future zeroed, so they are not "
            "the weights forward used.", "Store A.detach() itself.", _fact("noncausal_stored_masked")),
    Mistake("returned_weights", H, "forward returns the weights instead of the output",
            "forward returned A itself (B, T, T) rather than A @ v (B, T, d_head).",
            "Return the weighted sum of the values.", _fact("returned_weights")),
    Mistake("stored_scores", H, "self.A holds the scores, not the weights",
            "Your output is right, but self.A is the masked scores (with -inf) before the softmax.",
            "Store the softmax's result.", _fact("stored_scores")),
    Mistake("output_detached", H, "forward's output cut from the graph",
            "Your output is right but does not require grad (detached, or computed under torch.no_grad), so "
            "nothing in this head could ever train.", "Detach only the copy stored in self.A.",
            _fact("output_detached")),
    Mistake("input_detached", H, "The input cut from the graph",
            "Your head computes the right output, but no gradient reaches x: forward detaches its input, so in "
            "a deeper model nothing below this head could learn from it.", "Use x itself, not x.detach() or x.data.",
            _fact("input_detached")),
    Mistake("mask_sliced_wrong", H, "Wrong part of the mask for T < T_max",
            "At T = T_max your head is right, but at a shorter length its outputs differ from the first T "
            "outputs of the full sequence: what depends on the length, the block of the mask it uses, is not "
            "the top-left T x T one.", "tril[:T, :T] is the mask of a sequence of length T.",
            _fact("wrong_only_below_T_max")),
    Mistake("mask_not_registered", H, "Mask kept as a plain attribute",
            "Your `tril` is a tensor attribute, not a registered buffer: it is not saved with the module's "
            "state_dict and does not move with .to(device).", "self.register_buffer('tril', ...).",
            _fact("tril_plain_attribute")),
    Mistake("mask_buffer_misnamed", H, "Mask buffer under another name",
            "Your causal mask is a registered buffer, but not named `tril` as the contract asks.",
            "Later steps and the grader read self.tril.", _fact("mask_buffer_misnamed")),
    Mistake("global_max_subtracted", H, "Earlier outputs move in their last bits when a later token changes",
            "Your weights and outputs match a correct head's, and no gradient reaches an output from a later token, "
            "yet changing a later token changes earlier outputs in their last bits: a number taken over the whole "
            "sequence, future included, and out of the graph (.item(), .detach(), torch.no_grad()) enters every "
            "position's computation, such as a max subtracted for a stable softmax.",
            "Anything subtracted or divided for stability must come from each query's own allowed scores; "
            "F.softmax already subtracts each row's max.", _fact("future_in_last_bits")),
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
    Mistake("one_position_row", L, "The same position row in every slot",
            "Your X adds position row 0 to every slot's token row, so the rows carry no order: permuting the "
            "earlier tokens leaves the prediction unchanged (Cor 6.2 does not break).",
            "Slot t gets position row t: index the table with 0..T-1.", _fact("one_position_row")),
    Mistake("first_position", L, "Logits read from the first position",
            "forward_details()['logits'] is the first position's prediction, not the last's.",
            "The window predicts the token after its last slot.", _fact("first_position")),
    Mistake("no_relu", L, "Missing ReLU", "Your hidden layer is linear: the ReLU is missing.",
            "hidden = ReLU(hidden_layer(X')).", _fact("no_relu")),
    Mistake("returned_weights_without_causal_mask", L, "Returned weights without the causal mask",
            "The weights forward_details returns put weight on future keys, yet its contextual rows equal a correct "
            "model's: the weights you return are not the ones your messages use.",
            "Return the weights you multiply with V.", _fact("returned_weights_without_causal_mask")),
    Mistake("messages_without_causal_mask", L, "Messages computed without the causal mask",
            "The weights forward_details returns are right, but its contextual rows equal those of a model whose "
            "messages read future keys: the messages were computed from other weights than the ones returned.",
            "messages = weights @ V, with the weights you return.", _fact("messages_without_causal_mask")),
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
    Mistake("lm_mask_after_softmax", L, "Mask applied after the softmax",
            "Your weights are softmax(scores) over every key with the masked entries zeroed afterwards, so rows no "
            "longer sum to 1 and the normaliser still sees future and padded keys.",
            "Mask the scores with -inf before the softmax.", _weights("lm_mask_after_softmax")),
    Mistake("lm_mask_filled_with_zero", L, "Mask filled with 0 instead of -inf",
            "Your masked scores are 0 rather than -inf, and exp(0) is not zero: future and padded keys keep weight.",
            "What score makes exp(score) exactly zero?", _weights("lm_mask_filled_with_zero")),
    Mistake("lm_future_triangle", L, "Mask of the wrong triangle",
            "Your weights match a mask that hides the past (j < i) and keeps the future.",
            "Query i may read keys j <= i: mask what lies above the diagonal.", _weights("lm_future_triangle")),
    Mistake("lm_diagonal_masked", L, "Diagonal masked out",
            "Your weights match a mask that also hides each token from itself (j >= i), so a query with no earlier "
            "key has no allowed key and its row is NaN.",
            "The causal mask keeps the diagonal: torch.triu(..., diagonal=1) marks what to hide.",
            _weights("lm_diagonal_masked")),
    Mistake("divided_by_d_k", L, "Scores divided by d_k instead of sqrt(d_k)",
            "Your weights match softmax(QK^T / d_k): the scores are scaled down too far.",
            "Lemma 4.5 needs the standard deviation, sqrt(d_k), not the variance.", _weights("divided_by_d_k")),
    Mistake("lm_key_from_query", L, "Keys computed with the query projection",
            "Your weights match softmax(QQ^T / sqrt(d_k)): the keys came from W_Q.", "Check which layer makes K.",
            _weights("lm_key_from_query")),
    Mistake("positions_from_end", L, "Position rows counted from the end of the context",
            "On full windows your model is right, but on shorter ones its X uses the last T position rows "
            "instead of rows 0..T-1.", "Slot t of a window of length T gets position row t.",
            _fact("positions_from_end")),
    Mistake("full_length_only", L, "Works only at the full context length",
            "Your model agrees with a correct one on windows of length context_len, but fails or differs on "
            "shorter windows, which the checks also use.",
            "Build every size from the window's own T = ids.shape[1] (position rows, masks), not from context_len.",
            _fact("full_length_only")),
    Mistake("forward_reads_first_position", L, "forward reads the first position",
            "forward() returns the first slot's logits; forward_details()['logits'] is right.",
            "The window predicts the token after its last slot.", _fact("forward_reads_first_position")),
    Mistake("returns_probabilities", L, "Probabilities returned instead of logits",
            "forward() and logits_all are softmax(logits): cross_entropy applies its own log-softmax, so the loss "
            "cannot fall.", "Return the vocab_head output as it is.", _fact("returns_probabilities")),
    Mistake("attention_detached", L, "Attention weights detached in forward",
            "Your weights and logits are right, but no gradient reaches W_Q or W_K: the attention weights were "
            "detached on the way to the loss, so training could never change where the head looks.",
            "Do not detach anything on the path from the scores to the logits.",
            lambda ev: ev.get("qk_without_gradient") and ev.get("weights_correct")),
    Mistake("pad_id_hard_coded", L, "Padding id written as 0 instead of self.pad_id",
            "Built with pad_id=3, your model's weights match a padding mask made from id 0: padded keys (id 3) "
            "keep weight and real tokens with id 0 are masked.", "Build the padding mask from self.pad_id.",
            _fact("pad_id_hard_coded")),
    Mistake("no_padding_idx", L, "token_embedding without padding_idx",
            "Your token embedding is built without padding_idx=pad_id, so the padding row is trained like a word.",
            "Look at the arguments of nn.Embedding in __init__.", _fact("no_padding_idx")),
    Mistake("wrong_defaults", L, "Constructor defaults differ from the contract",
            "TeachingAttentionLM(vocab_size, context_len), as the seed builds it, does not give d_model=48, d_k=48, "
            "d_v=48, hidden=160, pad_id=0.", "Keep the given signature of __init__.", _fact("wrong_defaults")),
    Mistake("library_attention", L, "A library attention call",
            "The model runs torch's attention (F.scaled_dot_product_attention, F.multi_head_attention_forward or "
            "nn.MultiheadAttention) instead of the head this assignment builds by hand.",
            "Write the scores, the causal and padding masks and the softmax yourself.", _fact("uses_fused_attention")),
]
BY_ID = {m.id: m for m in CATALOGUE}
assert len(BY_ID) == len(CATALOGUE), "duplicate mistake ids"


def matches(assignment: str, evidence: dict) -> list[Mistake]:
    """Every catalogue entry of ``assignment`` whose signature holds, in catalogue order. More than one means
    the evidence does not single a mistake out: the corpus tests require exactly one for each mutant."""
    found = []
    for m in CATALOGUE:
        if m.assignment == assignment:
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
