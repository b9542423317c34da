"""The typical mistakes of a `TeachingAttentionLM`: what each looks like in the evidence, and what the student is told."""
from attnkit.toolkit.plugin import Mistake, fact, weights

L = "attention_lm"
MISTAKES = [
    # First: a model whose values are random in eval mode cannot be matched value for value with any other entry;
    # it is matched on what it reproducibly does (the rule, issue 22): the same windows twice give different
    # results in eval mode and in train mode, and no buffer or parameter was changed by a call.
    Mistake("lm_dropout_in_eval", L, "Randomness in eval mode (dropout that never switches off)",
            "The same windows, given twice to the same model in eval mode, gave different results (and in train "
            "mode too), while no call changed a buffer or parameter: something random runs whatever the mode, "
            "such as F.dropout, whose training argument defaults to True.",
            "Use nn.Dropout (which model.eval() switches off), or pass training=self.training to F.dropout.",
            fact("random_in_eval"), beside=True),
    # before no_padding_mask, whose weights it has in eval mode (blind set 11, m29)
    Mistake("padding_mask_only_in_training", L, "The padding mask is applied only in training mode",
            "Your model hides padded keys while training (its gradients in train mode are a correct model's), but "
            "after .eval() its real queries give weight to padded keys: its weights are a model's without the "
            "padding mask, and evaluation and generation run in eval mode.",
            "Apply the padding mask whatever the mode (self.training is for dropout, never for a mask).",
            fact("padding_mask_only_in_training")),
    Mistake("no_padding_mask", L, "Missing padding mask",
            "Real tokens give weight to padded keys, so the left padding leaks into predictions. (A mask of the "
            "transpose, a padded query's real keys, acts as none: with left padding those keys are all in the "
            "query's future, which the causal mask already hides.)",
            "Mask keys whose id is pad_id for queries that are real tokens.", weights("no_padding_mask")),
    Mistake("padding_mask_nan_rows", L, "Padding mask that produces NaN rows",
            "Padded keys are masked for every query, so a padded query at the start has no allowed key and "
            "its row becomes NaN.", "Mask padded keys only for real queries.", weights("padding_mask_nan_rows")),
    Mistake("no_residual", L, "Missing residual",
            "Your contextual rows are the attention update alone; the token rows X were never added back.",
            "X' = X + update.", fact("no_residual")),
    Mistake("no_position_rows", L, "Missing position rows",
            "Your X has no position rows, so the model cannot tell word order: permuting the earlier tokens leaves the prediction unchanged.",
            "Add the learned position row to each token row.", fact("no_position_rows")),
    Mistake("one_position_row", L, "The same position row in every slot",
            "Your X adds position row 0 to every slot's token row, so the rows carry no order: permuting the "
            "earlier tokens leaves the prediction unchanged.",
            "Slot t gets position row t: index the table with 0..T-1.", fact("one_position_row")),
    Mistake("first_position", L, "Logits read from the first position",
            "forward_details()['logits'] is the first position's prediction, not the last's.",
            "The window predicts the token after its last slot.", fact("first_position")),
    Mistake("no_relu", L, "Missing ReLU", "Your hidden layer is linear: the ReLU is missing.",
            "hidden = ReLU(hidden_layer(X')).", fact("no_relu")),
    Mistake("returned_weights_without_causal_mask", L, "Returned weights without the causal mask",
            "The weights forward_details returns put weight on future keys, yet its contextual rows equal a correct "
            "model's: the weights you return are not the ones your messages use.",
            "Return the weights you multiply with V.", fact("returned_weights_without_causal_mask")),
    Mistake("messages_without_causal_mask", L, "Messages computed without the causal mask",
            "The weights forward_details returns are right, but its contextual rows equal those of a model whose "
            "messages read future keys: the messages were computed from other weights than the ones returned.",
            "messages = weights @ V, with the weights you return.", fact("messages_without_causal_mask")),
    Mistake("future_mask_missing_in_details", L, "Future mask missing in forward_details",
            "forward_details lets queries read future keys (only padding is masked).",
            "Combine the causal mask with the padding mask.", weights("future_mask_missing_in_details")),
    Mistake("forward_ignores_padding", L, "forward and forward_details disagree on padded input",
            "Your forward() lets the last query read padded keys while forward_details() does not.",
            "Apply the same padding mask in both.", fact("forward_ignores_padding"), beside=True),
    Mistake("scaled_by_model_width", L, "Scaled by sqrt(d_model) instead of sqrt(d_k)",
            "Your scores are divided by the model width; this only shows when d_k != d_model.",
            "Which width do Q and K share?", weights("scaled_by_model_width")),
    Mistake("no_scaling", L, "No 1/sqrt(d_k) scaling", "Your scores are QK^T without scaling.",
            "Divide by the square root of d_k.", weights("no_scaling")),
    Mistake("softmax_over_queries", L, "Softmax over the query axis",
            "Your weights are normalised over queries rather than keys.", "Each row is one query: dim=-1.",
            weights("softmax_over_queries")),
    Mistake("cannot_train", L, "A forward that cannot train",
            "No gradient from the loss reaches any parameter: the output is detached from the model.",
            "Remove detach()/no_grad from the path to the logits.", fact("no_gradient_anywhere")),
    Mistake("biased_query", L, "Bias on an attention projection",
            "W_Q, W_K, W_V or W_O has a bias, which changes the parameter count.",
            "The projections are nn.Linear(..., bias=False).", fact("biased_attention_projection"), beside=True),
    Mistake("unused_W_O", L, "W_O never used",
            "The messages are added to X without the output projection W_O (it only runs when d_v == d_model).",
            "update = W_O(messages).", fact("W_O_unused")),
    Mistake("lm_mask_after_softmax", L, "Mask applied after the softmax",
            "Your weights are softmax(scores) over every key with the masked entries zeroed afterwards, so rows no "
            "longer sum to 1 and the normaliser still sees future and padded keys.",
            "Mask the scores with -inf before the softmax.", weights("lm_mask_after_softmax")),
    Mistake("lm_mask_filled_with_zero", L, "Mask filled with 0 instead of -inf",
            "Your masked scores are 0 rather than -inf, and exp(0) is not zero: future and padded keys keep weight.",
            "What score makes exp(score) exactly zero?", weights("lm_mask_filled_with_zero")),
    Mistake("lm_future_triangle", L, "Mask of the wrong triangle",
            "Your weights match a mask that hides the past (j < i) and keeps the future.",
            "Query i may read keys j <= i: mask what lies above the diagonal.", weights("lm_future_triangle")),
    Mistake("lm_diagonal_masked", L, "Diagonal masked out",
            "Your weights match a mask that also hides each token from itself (j >= i), so a query with no earlier "
            "key has no allowed key and its row is NaN.",
            "The causal mask keeps the diagonal: torch.triu(..., diagonal=1) marks what to hide.",
            weights("lm_diagonal_masked")),
    Mistake("divided_by_d_k", L, "Scores divided by d_k instead of sqrt(d_k)",
            "Your weights match softmax(QK^T / d_k): the scores are scaled down too far (d_k is sqrt(d_k) "
            "applied twice, or the variance where the standard deviation belongs).",
            "Lemma 4.5 needs the standard deviation, sqrt(d_k), not the variance.", weights("divided_by_d_k")),
    Mistake("lm_key_from_query", L, "Keys computed with the query projection",
            "Your weights match softmax(QQ^T / sqrt(d_k)): the keys came from W_Q.", "Check which layer makes K.",
            weights("lm_key_from_query")),
    Mistake("positions_from_end", L, "Position rows counted from the end of the context",
            "On full windows your model is right, but on shorter ones its X uses the last T position rows "
            "instead of rows 0..T-1.", "Slot t of a window of length T gets position row t.",
            fact("positions_from_end")),
    Mistake("full_length_only", L, "Works only at the full context length",
            "Your model agrees with a correct one on windows of length context_len, but fails or differs on "
            "shorter windows, which the checks also use.",
            "Build every size from the window's own T = ids.shape[1] (position rows, masks), not from context_len.",
            fact("full_length_only"), quotes_error=True),
    Mistake("forward_reads_first_position", L, "forward reads the first position",
            "forward() returns the first slot's logits; forward_details()['logits'] is right.",
            "The window predicts the token after its last slot.", fact("forward_reads_first_position")),
    Mistake("returns_probabilities", L, "Probabilities returned instead of logits",
            "forward() and logits_all are softmax(logits): cross_entropy applies its own log-softmax, so the loss "
            "cannot fall.", "Return the vocab_head output as it is.", fact("returns_probabilities")),
    Mistake("attention_detached", L, "Attention weights detached in forward",
            "Your weights and logits are right, but no gradient reaches W_Q or W_K: the attention weights were "
            "detached on the way to the loss, so training could never change where the head looks.",
            "Do not detach anything on the path from the scores to the logits.",
            lambda ev: ev.get("qk_without_gradient") and ev.get("weights_correct")),
    Mistake("pad_id_hard_coded", L, "Padding id written as 0 instead of self.pad_id",
            "Built with pad_id=3, your model's weights match a padding mask made from id 0: padded keys (id 3) "
            "keep weight and real tokens with id 0 are masked.", "Build the padding mask from self.pad_id.",
            fact("pad_id_hard_coded"), beside=True),
    Mistake("no_padding_idx", L, "token_embedding without padding_idx",
            "Your token embedding is built without padding_idx=pad_id, so the padding row is trained like a word.",
            "Look at the arguments of nn.Embedding in __init__.", fact("no_padding_idx")),
    Mistake("wrong_defaults", L, "Constructor defaults differ from the contract",
            "TeachingAttentionLM(vocab_size, context_len), as the seed builds it, does not give d_model=48, d_k=48, "
            "d_v=48, hidden=160, pad_id=0.", "Keep the given signature of __init__.", fact("wrong_defaults")),
    Mistake("library_attention", L, "A library attention call",
            "The model runs torch's attention (F.scaled_dot_product_attention, F.multi_head_attention_forward or "
            "nn.MultiheadAttention) instead of the head this assignment builds by hand.",
            "Write the scores, the causal and padding masks and the softmax yourself.", fact("uses_fused_attention"), beside=True),
]
