"""The typical mistakes of a `Head`: what each looks like in the evidence, and what the student is told."""
from attnkit.toolkit.plugin import Mistake, fact, weights_and_output

H = "causal_head"


def weights(name):
    """The weights of mistake ``name``, and an output computed with them: a head whose stored copy alone is wrong
    computes right and is not told its scores are wrong (weights_and_output names what is only stored)."""
    return lambda ev: name in ev.get("computed_with", ())
MISTAKES = [
    Mistake("mask_after_softmax", H, "Mask applied after the softmax",
            "Your weights are softmax(S) with the future zeroed afterwards, so rows no longer sum to 1 and "
            "the normaliser still sees the future.",
            "Mask the scores with -inf before the softmax.", weights("mask_after_softmax")),
    Mistake("no_scale", H, "No 1/sqrt(d_k) scaling",
            "Your weights are softmax(QK^T): the scores were never scaled, so the softmax saturates as d_k grows "
            "(Lemma 4.5).", "Divide the scores by the square root of the head width.", weights("no_scale")),
    Mistake("divide_by_dk", H, "Scores divided by d_k instead of sqrt(d_k)",
            "Your weights match softmax(QK^T / d_k): the temperature is too high (d_k is sqrt(d_k) applied twice, "
            "or the variance where the standard deviation belongs).",
            "Lemma 4.5 needs the standard deviation, sqrt(d_k), not the variance.", weights("divide_by_dk")),
    Mistake("scale_by_model_width", H, "Scaled by the model width instead of the head width",
            "Your weights match softmax(QK^T / sqrt(d)) with d the input width; the scores live in R^{d_head}.",
            "Which dimension do q and k share?", weights("scale_by_model_width")),
    Mistake("softmax_wrong_axis", H, "Softmax over the wrong axis",
            "Your weights are normalised over queries (columns sum to 1), not over keys.",
            "Each query's row must be a distribution over the positions it reads: dim=-1.",
            weights("softmax_wrong_axis")),
    Mistake("future_triangle", H, "Mask of the wrong triangle",
            "Your head masks the past and keeps the future (and the last row has nothing left).",
            "Position i may read j <= i: keep tril, mask what is above the diagonal.", weights("future_triangle")),
    Mistake("diagonal_masked", H, "Diagonal masked out",
            "Your mask also hides each token from itself, so the first row has no allowed position and becomes NaN.",
            "The causal mask includes the diagonal (torch.tril without an offset).", weights("diagonal_masked")),
    # what the evidence shows is the shape, not how it came: the buffer used whole and one cut by another size
    # (T read from x's last axis, d, equal to T_max at the judge's sizes) fail alike
    Mistake("mask_not_sliced", H, "Mask not cut to the input's length",
            "With a sequence shorter than T_max your mask does not have the input's T x T shape: the buffer is "
            "used whole, or cut by another size.",
            "Use the top-left T x T block of the buffer, with T from x's sequence axis: B, T, d = x.shape.",
            fact("short_fails_on_shape"), beside=True),
    Mistake("causal_flag_ignored", H, "The causal flag is ignored",
            "Your head masks the future even when constructed with causal=False.",
            "Apply the mask only when self.causal is true.", fact("noncausal_is_masked"), beside=True),
    Mistake("mask_never_applied", H, "The causal mask is never applied",
            "Your weights equal the unmasked softmax, so every position reads the future.",
            "Is the masked result assigned back, and is the branch taken when causal=True?",
            weights_and_output("mask_never_applied", False)),
    Mistake("mask_filled_with_zero", H, "Mask filled with 0 instead of -inf",
            "A score of 0 still gets weight exp(0) after the softmax, so the future keeps weight.",
            "What score makes exp(score) exactly zero?", weights("mask_filled_with_zero")),
    Mistake("weights_stored_before_masking", H, "Weights stored before masking",
            "Your output is right but self.A holds the unmasked softmax, so the pictures show the future.",
            "Store the weights you actually multiply with V.",
            weights_and_output("mask_never_applied", True)),
    Mistake("scores_detached", H, "Weights detached inside the computation",
            "No gradient reaches the query and key weights: the scores were detached before being used, so "
            "training could never change where the head looks.",
            "Detach only the copy you store in self.A.",
            lambda ev: ev.get("qk_without_gradient") and ev.get("weights_correct")),
    Mistake("mask_as_parameter", H, "Mask registered as a parameter",
            "Your `tril` is an nn.Parameter, not a buffer: model.parameters() lists it, so an optimiser is handed "
            "the mask (and trains it, unless its requires_grad is False), and the head has parameters beyond its "
            "three projections.",
            "Non-trainable state belongs in register_buffer.", fact("tril_is_parameter"), beside=True),
    Mistake("A_not_detached", H, "self.A keeps the autograd graph",
            "The stored weights still require grad, which keeps the graph alive after every call.",
            "Store a detached copy.", fact("A_requires_grad"), beside=True),
    Mistake("biased_projections", H, "Biased projections",
            "At least one of your query, key and value layers has a bias; the lecture's W_Q, W_K, W_V are plain "
            "matrices.",
            "Look at the arguments of nn.Linear.", fact("biased_projection"), beside=True),
    Mistake("dropout_on_weights", H, "Randomness in the head (dropout on the weights)",
            "Two calls on the same input gave different outputs.",
            "This head has no dropout: the same input must give the same output.", fact("nondeterministic"), beside=True),
    Mistake("running_mean", H, "Content-blind running mean",
            "Your weights are uniform over the allowed positions, whatever the content: the scores are not "
            "computed from queries and keys (the W_Q = W_K = 0 case of 4.5).",
            "The scores must come from q and k.", weights("running_mean")),
    Mistake("key_from_query", H, "Key computed with the query projection",
            "Your weights match softmax(QQ^T): the keys came from self.query.", "Check which layer makes k.",
            weights("key_from_query")),
    Mistake("scores_transposed", H, "Scores transposed",
            "Your weights match softmax(KQ^T): row i holds how keys see query i.",
            "Row i of S must be q_i against every key.", weights("scores_transposed")),
    Mistake("banned_fused_call", H, "A fused attention call",
            "The head uses F.scaled_dot_product_attention or nn.MultiheadAttention, which this assignment "
            "builds by hand.", "Write the scores, mask and softmax yourself.", fact("uses_fused_attention"), beside=True),
    # Walking the seed's Head line by line: its defaults, each operand and layer, the mask's buffer,
    # fill and slice, the softmax's axis, what is stored and what is returned.
    Mistake("causal_default_false", H, "The causal flag defaults to False",
            "Built as the lecture builds it, Head(d, d_head, T_max), your head is not causal: the contract's "
            "default is causal=True, so every later step that relies on it would read the future.",
            "Look at the default value of `causal` in __init__'s signature.", fact("default_not_causal"), beside=True),
    Mistake("projections_shared", H, "Two projections are one layer",
            "Two of self.query, self.key and self.value are one and the same layer (such as self.key = self.query), "
            "so they share their weights: the head has fewer than three projection matrices, and whatever weights "
            "it is given, those two roles compute the same thing.",
            "Make three separate nn.Linear(d, d_head, bias=False) layers.", fact("projections_shared")),
    Mistake("value_from_wrong_layer", H, "Values computed with the wrong layer",
            "Your weights are right, but the output is those weights times x W_Q^T or x W_K^T: v does not come "
            "from self.value.", "Check which layer makes v.",
            lambda ev: any(r[:2] == ("query", "key") for r in ev.get("roles_match", ()))),
    Mistake("projections_swapped", H, "Query, key and value layers used in the wrong roles",
            "Your output and weights match a head whose q, k and v come from other layers than self.query, "
            "self.key and self.value respectively.", "q = self.query(x), k = self.key(x), v = self.value(x).",
            lambda ev: not ev.get("projections_shared") and any(
                r[:2] not in (("query", "key"), ("query", "query"), ("key", "query")) for r in ev.get("roles_match", ()))),
    Mistake("mask_fill_positive", H, "Mask filled with +1e9 (the wrong sign)",
            "Your weights match a softmax whose future scores were set to a huge positive number, so each query "
            "puts all its weight on the future.", "exp(score) must vanish where the mask is: a large negative "
            "number, or -inf.", weights("mask_fill_positive")),
    Mistake("softmax_over_batch", H, "Softmax over the batch axis",
            "Your weights are normalised across the examples of the batch (dim 0), not over the keys: "
            "F.softmax without dim= picks dim 0 for a 3-D tensor.",
            "Name the axis: F.softmax(scores, dim=-1).", weights("softmax_over_batch")),
    Mistake("scale_multiplied", H, "Scores multiplied by sqrt(d_k) instead of divided",
            "Your weights match softmax(QK^T * sqrt(d_k)): the temperature went the wrong way and the softmax "
            "saturates.", "Compare k.shape[-1]**0.5 with k.shape[-1]**-0.5.", weights("scale_multiplied")),
    Mistake("mask_upper_triangle", H, "The mask is upper-triangular (torch.triu)",
            "Your head keeps each position and its future and masks the past: the buffer holds torch.triu.",
            "The causal mask keeps j <= i: torch.tril.", weights("mask_upper_triangle")),
    Mistake("softmax_not_normalised", H, "Exponentials never normalised",
            "Your weights are exp(scores) without dividing by their row sum, so rows do not sum to 1.",
            "Divide each row by its sum, or use F.softmax(..., dim=-1).",
            weights_and_output("softmax_not_normalised", False)),
    Mistake("stored_exponentials", H, "self.A holds the exponentials, not the weights",
            "Your output is right, but self.A is exp(scores) before the division by the row sum.",
            "Store the normalised weights, the ones multiplied with v.", fact("stored_exponentials")),
    Mistake("residual_inside_head", H, "A residual added inside the head",
            "Your weights are right, but forward returns A @ v + v: the head adds its own values back, so its "
            "output leaves the convex hull of the values (the residual belongs to the block around the head).",
            "forward returns A @ v alone.", fact("residual_inside_head")),
    Mistake("mask_band", H, "A local window instead of the causal mask",
            "Your head also masks positions more than a few steps back: every allowed position (j <= i) must keep "
            "a positive weight.", "The causal mask hides only j > i: torch.tril without a lower bound.",
            lambda ev: any(n.startswith("mask_band_") for n in ev.get("computed_with", ()))),
    Mistake("noncausal_zero_fill", H, "With causal=False the future is filled with 0",
            "Your causal head is right, but with causal=False the future scores are set to 0 rather than left "
            "alone: a score of 0 still replaces the real one, so the head is neither masked nor equivariant.",
            "With causal=False, do not touch the scores at all.", fact("noncausal_zero_fill")),
    Mistake("noncausal_stored_masked", H, "With causal=False self.A is masked for storage",
            "Your non-causal output is right, but the weights you store have the future zeroed, so they are not "
            "the weights forward used.", "Store A.detach() itself.", fact("noncausal_stored_masked")),
    Mistake("mask_only_in_training", H, "The causal mask is applied only in training mode",
            "Your head is right in training mode, but after .eval() its output is a head's without the causal "
            "mask: each position reads the future, which is what generation runs in.",
            "Apply the mask whatever the mode (self.training decides dropout, never the mask).",
            fact("mask_only_in_training")),
    Mistake("noncausal_unscaled", H, "With causal=False the scores are not scaled",
            "Your causal head is right, but with causal=False its weights and output come from the unscaled scores "
            "q k^T: the division by sqrt(d_head) is applied only inside the causal branch.",
            "Scale the scores before the `if self.causal:`, so both kinds of head divide by sqrt(d_head).",
            fact("noncausal_unscaled")),
    Mistake("returned_weights", H, "forward returns the weights instead of the output",
            "forward returned A itself (B, T, T) rather than A @ v (B, T, d_head).",
            "Return the weighted sum of the values.", fact("returned_weights")),
    Mistake("stored_scores", H, "self.A holds the scores, not the weights",
            "Your output is right, but self.A is the masked scores (with -inf) before the softmax.",
            "Store the softmax's result.", fact("stored_scores")),
    Mistake("output_detached", H, "forward's output cut from the graph",
            "Your output is right but does not require grad (detached, or computed under torch.no_grad), so "
            "nothing in this head could ever train.", "Detach only the copy stored in self.A.",
            fact("output_detached"), beside=True),
    Mistake("input_detached", H, "The input cut from the graph",
            "Your head computes the right output, but no gradient reaches x: forward detaches its input, so in "
            "a deeper model nothing below this head could learn from it.", "Use x itself, not x.detach() or x.data.",
            fact("input_detached"), beside=True),
    Mistake("output_float64", H, "Output in float64 for a float32 input",
            "Your head returns float64 when its input is float32: forward computes in double (x.double(), "
            ".double() on q, k or v, or a float64 tensor it makes) and does not convert back, so every layer after "
            "it runs in another precision.", "Return the input's dtype: compute in it, or convert back with "
            ".to(x.dtype).", fact("output_float64"), beside=True),
    Mistake("mask_sliced_wrong", H, "Wrong part of the mask for T < T_max",
            "At T = T_max your head is right, but at a shorter length its outputs differ from the first T "
            "outputs of the full sequence: what depends on the length, the block of the mask it uses, is not "
            "the top-left T x T one.", "tril[:T, :T] is the mask of a sequence of length T.",
            fact("wrong_only_below_T_max")),
    Mistake("mask_not_registered", H, "Mask kept as a plain attribute",
            "Your `tril` is a tensor attribute, not a registered buffer: it is not saved with the module's "
            "state_dict and does not move with .to(device).", "self.register_buffer('tril', ...).",
            fact("tril_plain_attribute"), beside=True),
    Mistake("mask_buffer_misnamed", H, "Mask buffer under another name",
            "Your causal mask is a registered buffer, but not named `tril` as the contract asks.",
            "Later steps and the grader read self.tril.", fact("mask_buffer_misnamed"), beside=True),
    Mistake("global_max_subtracted", H, "Earlier outputs move in their last bits when a later token changes",
            "Your weights and outputs match a correct head's, and no gradient reaches an output from a later token, "
            "yet changing a later token changes earlier outputs in their last bits: a number taken over the whole "
            "sequence, future included, and out of the graph (.item(), .detach(), torch.no_grad()) enters every "
            "position's computation, such as a max subtracted for a stable softmax.",
            "Anything subtracted or divided for stability must come from each query's own allowed scores; "
            "F.softmax already subtracts each row's max.", fact("future_in_last_bits")),
    Mistake("future_cancelled_in_graph", H, "Earlier outputs move in their last bits when a later token changes",
            "Your weights and outputs match a correct head's, yet changing a later token changes earlier outputs in "
            "their last bits, and their gradient with respect to it is not zero but rounding-small: the future's "
            "scores enter the computation and cancel only up to float rounding (a softmax over the whole row, future "
            "included, then multiplied by the mask and renormalised, does this).",
            "Mask the scores with -inf before the softmax, so the future never enters it.",
            fact("future_cancelled_in_graph")),
    Mistake("kept_from_first_call", H, "Something of the first call kept and reused",
            "A fresh head is right at every length, but the same head called at a shorter length and then at T_max "
            "raises or gives other outputs, while no call changed its buffers or weights: forward keeps something it "
            "built for the first call (a mask of the first length) and reuses it.",
            "Build what depends on T from the input on every call; the head's only state is its buffer and weights.",
            fact("kept_from_first_call")),
    Mistake("buffer_changed_by_forward", H, "forward writes into its mask buffer",
            "After a call the registered buffer is no longer what __init__ made (its values or its shape), so the "
            "calls after it see another mask.", "Read the buffer; build the masked scores in a new tensor.",
            fact("buffer_changed_by_forward")),
    Mistake("softmax_overflow", H, "Softmax overflows on large scores",
            "Your weights are right on ordinary inputs, but on scores in the hundreds self.A is NaN or inf: exp() of a "
            "score above 88.7 is inf in float32, so a softmax written as exp(s) / sum exp(s) breaks.",
            "Subtract each row's largest allowed score before exp(), or use F.softmax(..., dim=-1), which does.",
            fact("overflows_on_huge_scores")),
]
