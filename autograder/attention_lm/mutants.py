"""Submissions for `TeachingAttentionLM`: mistakes as edits of the solution cell, and correct alternatives.

Each mistake lists exactly the checks it must fail; each alternative must get every point.
The tiny judge model has d_v != d_model, so a missing W_O cannot even run there.
"""
from attnkit.toolkit.corpus import RESTART_PROFILER, STOP_PROFILER, UNREGISTER_STAND_INS, apply_edits, lines as _lines, \
    mutant as _m, modes_popped as _modes_popped, variant as _v, contract_cell, solution_source

SOLUTION_CELL = contract_cell(__file__)      # the manifest's [contract]

REF = ("reference_agreement",)
ALONGSIDE = REF      # what any wrong answer may lose beside the check it isolates (attnkit.toolkit.corpus)
PAD_MASK = "attention_mask = future[None, :, :] | padded_key_for_real_query"
SCALE = "/ math.sqrt(self.d_k)"
MESSAGE = "message_last = F.softmax(scores_last, dim=-1) @ V"       # forward's last-query attention
KEEP = "~ids.eq(self.pad_id)[:, None, :]"                            # sdpa's boolean mask: True = attend
FUT = "future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ids.device), diagonal=1)"   # the causal mask line

# Catalogue entries a mistake's evidence fits besides its own, in catalogue order after it (the student is told
# the first, its own): each of these mistakes also breaks what the later entry describes. Any other fit fails
# tests/course/test_checks.py.
ALSO_FITS = {
    "cannot_train": ("unused_W_O", "attention_detached"),
    "padding_mask_only_in_training": ("no_padding_mask",),
    "no_padding_idx": ("wrong_defaults",),
    "positions_from_end": ("full_length_only",),
    "returned_weights_without_causal_mask": ("future_mask_missing_in_details",),
}

MUTANTS = {
    "no_padding_mask": _m("missing padding mask (details and forward)",
                          [(PAD_MASK, "attention_mask = future[None, :, :]"),
                           ("scores_last = scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], float(\"-inf\"))", "pass")],
                          "padded_keys", *REF),
    # blind set 11's m29 (told "missing padding mask", which it was not in train mode)
    "padding_mask_only_in_training": _m("the padding mask applied only in training mode (details and forward)",
                                        [(PAD_MASK, "attention_mask = future[None, :, :] | (padded_key_for_real_query"
                                                    " & self.training)"),
                                         ("scores_last = scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], "
                                          "float(\"-inf\"))", "scores_last = scores_last.masked_fill(ids.eq("
                                          "self.pad_id)[:, None, :] & self.training, float(\"-inf\"))")],
                                        "padded_keys", *REF),
    "padding_mask_nan_rows": _m("padded keys masked for every query: NaN rows for padded queries",
                                [("padded_key_for_real_query = (~real[:, None, :]) & real[:, :, None]",
                                  "padded_key_for_real_query = (~real[:, None, :]).expand(-1, T, -1)")],
                                "rows_sum_to_one"),        # NaN rows carry no measured weight on the future
    "no_residual": _m("missing residual: contextual = updates",
                      [("contextual = X + updates", "contextual = updates"),
                       ("contextual_last = X[:, -1, :] + self.W_O(message_last).squeeze(1)",
                        "contextual_last = self.W_O(message_last).squeeze(1)")], *REF),
    "no_position_rows": _m("position rows never added",
                           [("X = self.token_embedding(ids) + self.position_embedding(positions)[None, :, :]",
                             "X = self.token_embedding(ids) + 0 * self.position_embedding(positions)[None, :, :]")],
                           "equivariance", "finite_gradients", *REF),
    "first_position": _m("logits read from the first position instead of the last",
                         [("logits=logits_all[:, -1, :]", "logits=logits_all[:, 0, :]")],
                         "forward_matches_details"),
    "no_relu": _m("missing ReLU in the hidden layer",
                  [("hidden = F.relu(self.hidden_layer(contextual))", "hidden = self.hidden_layer(contextual)"),
                   ("F.relu(self.hidden_layer(contextual_last))", "self.hidden_layer(contextual_last)")], *REF),
    "future_mask_missing_in_details": _m("future mask missing in forward_details only",
                                         [(PAD_MASK, "attention_mask = padded_key_for_real_query")],
                                         "no_future_weight", "future_edit", *REF),
    "forward_ignores_padding": _m("forward and forward_details disagree on padded input",
                                  [("scores_last = scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], float(\"-inf\"))", "pass")],
                                  "forward_matches_details", *REF),
    "scaled_by_model_width": _m("scaled by sqrt(d_model): wrong only when d_k != d_model",
                                [(SCALE, "/ math.sqrt(X.shape[-1])")], "scaling", *REF),
    "no_scaling": _m("no 1/sqrt(d_k) scaling", [(SCALE, "")], "scaling", *REF),
    "softmax_over_queries": _m("softmax over the query axis", [("F.softmax(masked_scores, dim=-1)", "F.softmax(masked_scores, dim=-2)")],
                               "rows_sum_to_one", "forward_matches_details", "future_edit", "scaling", *REF),
    "cannot_train": _m("forward that cannot train (logits detached)",
                       [("return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))",
                         "return self.vocab_head(F.relu(self.hidden_layer(contextual_last))).detach().requires_grad_()")],
                       "finite_gradients", "tiny_batch_overfit"),
    "biased_query": _m("a bias on W_Q", [("self.W_Q = nn.Linear(d_model, d_k, bias=False)",
                                          "self.W_Q = nn.Linear(d_model, d_k, bias=True)")],
                       "parameter_count", "scaling", *REF),
    "library_attention": _m("F.scaled_dot_product_attention for forward's last query",
                            [(MESSAGE, f"message_last = F.scaled_dot_product_attention(q_last, K, V, attn_mask={KEEP})")],
                            "parameter_count"),
    "unused_W_O": _m("messages added to X without W_O", [("updates = self.W_O(messages)", "updates = messages"),
                                                       ("self.W_O(message_last)", "message_last")],
                     "forward_matches_details", "no_future_weight", "rows_sum_to_one", "future_edit", "finite_gradients",
                     "padded_keys", "equivariance", "scaling", *REF),
}

MUTANTS.update({
    "returned_weights_without_causal_mask": _m(
        "the returned weights use the padding mask only; the messages use the right ones",
        [("weights = F.softmax(masked_scores, dim=-1)",
          "weights = F.softmax(scores.masked_fill(padded_key_for_real_query, float(\"-inf\")), dim=-1)"),
         ("messages = weights @ V", "messages = F.softmax(masked_scores, dim=-1) @ V")],
        "no_future_weight", *REF),
    "messages_without_causal_mask": _m(
        "the returned weights are right; the messages use the padding mask only",
        [("messages = weights @ V",
          "messages = F.softmax(scores.masked_fill(padded_key_for_real_query, float(\"-inf\")), dim=-1) @ V")],
        "future_edit", *REF),
    "lm_mask_after_softmax": _m("the mask applied after the softmax (zeros), in both methods",
                                [("weights = F.softmax(masked_scores, dim=-1)",
                                  "weights = F.softmax(scores, dim=-1).masked_fill(attention_mask, 0.0)"),
                                 (MESSAGE, "message_last = F.softmax(q_last @ K.transpose(-2, -1) / math.sqrt(self.d_k), "
                                           "dim=-1).masked_fill(ids.eq(self.pad_id)[:, None, :], 0.0) @ V")],
                                "rows_sum_to_one", "future_edit", *REF),    # ratios kept: the scale still fits
    "lm_mask_filled_with_zero": _m("masked scores filled with 0 instead of -inf, in both methods",
                                   [('masked_fill(attention_mask, float("-inf"))', "masked_fill(attention_mask, 0.0)"),
                                    ('masked_fill(ids.eq(self.pad_id)[:, None, :], float("-inf"))',
                                     "masked_fill(ids.eq(self.pad_id)[:, None, :], 0.0)")],
                                   "no_future_weight", "future_edit", "padded_keys", *REF),
    "lm_future_triangle": _m("the mask hides the past and keeps the future",
                             [("future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ids.device), diagonal=1)",
                               "future = torch.tril(torch.ones(T, T, dtype=torch.bool, device=ids.device), diagonal=-1)")],
                             "no_future_weight", "future_edit", "forward_matches_details", "scaling", *REF),
    "lm_diagonal_masked": _m("the causal mask hides the diagonal too",
                             [("device=ids.device), diagonal=1)", "device=ids.device), diagonal=0)")],
                             "rows_sum_to_one", "forward_matches_details", "scaling", *REF),
    "divided_by_d_k": _m("scores divided by d_k", [(SCALE, "/ self.d_k")], "scaling", *REF),
    "lm_key_from_query": _m("keys made with W_Q", [("self.W_K(X)", "self.W_Q(X)")],
                            "finite_gradients", *REF),       # the scaling weights have W_K = W_Q
    "full_length_only": _m("the position table added whole: works only when T == context_len",
                           [("self.position_embedding(positions)[None, :, :]", "self.position_embedding.weight[None, :, :]")],
                           "forward_matches_details", "no_future_weight", "rows_sum_to_one", "future_edit",
                           "padded_keys", *REF),
    "positions_from_end": _m("position rows counted from the end of the context",
                             [("positions = torch.arange(T, device=ids.device)",
                               "positions = torch.arange(self.context_len - T, self.context_len, device=ids.device)")],
                             *REF),
    "one_position_row": _m("every slot given position row 0: the position table indexed by zeros, in both methods",
                           [("positions = torch.arange(T, device=ids.device)",
                             "positions = torch.zeros(T, dtype=torch.long, device=ids.device)")],
                           "equivariance", *REF),     # every parameter still used: row 0 gets a gradient
    "forward_reads_first_position": _m("forward returns the first position's logits",
                                       [("_, T = ids.shape\n", "return self.forward_details(ids)[\"logits_all\"][:, 0, :]\n"
                                                                "        _, T = ids.shape\n")],
                                       "forward_matches_details", "finite_gradients", "tiny_batch_overfit",
                                       "equivariance", *REF),
    "returns_probabilities": _m("softmax probabilities returned instead of logits, in both methods",
                                [("logits_all = self.vocab_head(hidden)", "logits_all = F.softmax(self.vocab_head(hidden), dim=-1)"),
                                 ("return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))",
                                  "return F.softmax(self.vocab_head(F.relu(self.hidden_layer(contextual_last))), dim=-1)")],
                                "tiny_batch_overfit", *REF),
    "attention_detached": _m("forward detaches the attention weights",
                             [(MESSAGE, "message_last = F.softmax(scores_last, dim=-1).detach() @ V")],
                             "finite_gradients"),
    "pad_id_hard_coded": _m("the padding mask built from id 0, not self.pad_id, in both methods",
                            [("real = ids.ne(self.pad_id)", "real = ids.ne(0)"),
                             ("ids.eq(self.pad_id)[:, None, :], float", "ids.eq(0)[:, None, :], float")],
                            "padded_keys"),
    "no_padding_idx": _m("token_embedding built without padding_idx",
                         [("nn.Embedding(vocab_size, d_model, padding_idx=pad_id)", "nn.Embedding(vocab_size, d_model)")],
                         "parameter_count"),
    "wrong_defaults": _m("a default d_k of 32", [("d_k=48, d_v=48", "d_k=32, d_v=48")], "parameter_count"),
})
MUTANTS.update({
    # Issue 22: randomness in eval mode, named by what it reproducibly does (autograder/attention_lm/mistakes.py)
    "lm_dropout_in_eval": _m("dropout on the attention weights that never switches off (F.dropout's default "
                            "training=True), in both methods", [
        ("weights = F.softmax(masked_scores, dim=-1)", "weights = F.dropout(F.softmax(masked_scores, dim=-1), p=0.1)"),
        (MESSAGE, "message_last = F.dropout(F.softmax(scores_last, dim=-1), p=0.1) @ V")],
        "forward_matches_details", "rows_sum_to_one", "future_edit", "equivariance", *REF),   # the scale: ratios kept
})
# Mistakes of the catalogue written another way: each must lose exactly its checks and get that name. Kept out of
# VARIANTS, which tests/course/test_attack_fused.py reads as the fused-call spellings only; tests/course/test_lm_checks.py grades them.
SPELLINGS = {
    "future_mask_sized_by_context_len": _v(
        "the causal mask built at context_len, not T", "full_length_only",
        [("future = torch.triu(torch.ones(T, T,", "future = torch.triu(torch.ones(self.context_len, self.context_len,")],
        "forward_matches_details", "no_future_weight", "rows_sum_to_one", "future_edit", "padded_keys", *REF),
    "default_pad_id_one": _v("a default pad_id of 1", "wrong_defaults", [("hidden=160, pad_id=0)", "hidden=160, pad_id=1)")],
                             "parameter_count"),
}

SDPA_HIDDEN = 'getattr(F, "scaled_dot_" + "product_attention")'           # no name a text scan could see
MHA_HIDDEN = 'getattr(F, "multi_head_" + "attention_forward")'

MHA_WEIGHTS = ["E = q_last.shape[-1]",            # F.multi_head_attention_forward's weights, identity projections
               "eye = torch.eye(E)",
               "_, w = F.multi_head_attention_forward(",
               "    q_last.transpose(0, 1), K.transpose(0, 1), K.transpose(0, 1), E, 1, None, None, None, None, False,",
               "    0.0, eye, None, training=False, key_padding_mask=ids.eq(self.pad_id),",
               "    use_separate_proj_weight=True, q_proj_weight=eye, k_proj_weight=eye, v_proj_weight=eye)",
               "message_last = w @ V"]
MHA_MODULE = ["E = q_last.shape[-1]",             # an nn.MultiheadAttention made in forward: no submodule to see
              "mha = nn.MultiheadAttention(E, 1, bias=False, batch_first=True)",
              "with torch.no_grad():",
              "    mha.in_proj_weight.copy_(torch.eye(E).repeat(3, 1))",
              "    mha.out_proj.weight.copy_(torch.eye(E))",
              "_, w = mha(q_last, K, K, key_padding_mask=ids.eq(self.pad_id))",
              "message_last = w @ V"]


FUSED = "library_attention"
SDPA_CALL = f"message_last = {SDPA_HIDDEN}(q_last, K, V, attn_mask={KEEP})"
# The mistake library_attention, written to slip past a scan of the source and the module check: the
# child's operator watch (attnkit/isolation/op_watch.py) sees what ran. Each loses parameter_count only.
VARIANTS = {
    "aten_math_op": _v("the aten math kernel of sdpa, called through torch.ops", FUSED, [(
        MESSAGE, "message_last = torch.ops.aten._scaled_dot_product_attention_math(q_last, K, V, attn_mask=torch.zeros_like("
                 "scores_last).masked_fill(ids.eq(self.pad_id)[:, None, :], float('-inf')))[0]")],
        "parameter_count"),
    "getattr_concat": _v("F.scaled_dot_product_attention fetched by a concatenated string", FUSED,
                         [(MESSAGE, SDPA_CALL)], "parameter_count"),
    "multi_head_attention_forward": _v("F.multi_head_attention_forward's weights (no fused kernel at the dispatcher)",
                                       FUSED, [(MESSAGE, _lines(MHA_WEIGHTS))], "parameter_count"),
    "multihead_attention_in_forward": _v("an nn.MultiheadAttention built inside forward, not a submodule", FUSED,
                                         [(MESSAGE, _lines(MHA_MODULE))], "parameter_count"),
    "pop_modes_around_sdpa": _v("torch-function modes popped around a hidden sdpa: the dispatcher still sees it",
                                FUSED, [(MESSAGE, _modes_popped([SDPA_CALL]))], "parameter_count"),
    "pop_modes_around_mha": _v("torch-function modes popped around a hidden F.multi_head_attention_forward", FUSED,
                               [(MESSAGE, _modes_popped([ln.replace("F.multi_head_attention_forward", MHA_HIDDEN)
                                                         for ln in MHA_WEIGHTS]))], "parameter_count"),
    "stop_profiler_and_pop_modes": _v("torch's profiler stopped and the modes popped around a hidden sdpa (what "
                                      "blinded the watch when it was a recording)", FUSED,
                                      [(MESSAGE, _lines([STOP_PROFILER, _modes_popped([SDPA_CALL])]))],
                                      "parameter_count"),
    "unregister_stand_ins": _v("the grader's stand-ins for torch's attention kernels unregistered before a hidden "
                               "sdpa: nothing fused is seen, only that they were taken away", None,
                               [(MESSAGE, _lines([UNREGISTER_STAND_INS, SDPA_CALL]))], "parameter_count"),
    "restart_profiler": _v("the profiler stopped and one of its own started before a hidden sdpa", FUSED, [(
        MESSAGE, _lines([STOP_PROFILER, RESTART_PROFILER, SDPA_CALL]))],
        "parameter_count"),
    # Issue 22: a contract slip no catalogue entry names yet (the judge may only say "no known pattern").
    # Issue 22: mistakes the calls of one instance, the repeats and the meta device catch. A tensor made on the
    # CPU inside a method, or kept from the first call, breaks the notebook's training on DEVICE (a GPU): it costs
    # the contract check (parameter_count), which measures it on the meta device, and nothing else.
    "cpu_mask_in_details": _v("the causal mask built on the CPU inside forward_details (no device=)",
                              "tensor_made_on_cpu_in_forward", [(
        "torch.ones(T, T, dtype=torch.bool, device=ids.device)", "torch.ones(T, T, dtype=torch.bool)")],
        "parameter_count"),
    # blind set 13, m19: the padding test on ids.cpu(), which the meta device could not copy (no finding); a GPU
    # copies it, and the CPU mask then meets the GPU's scores
    "padding_test_on_cpu_ids": _v("the padding test made on ids.cpu(), in both methods",
                                  "tensor_made_on_cpu_in_forward", [
        ("real = ids.ne(self.pad_id)", "real = ids.cpu().ne(self.pad_id)"),
        ("ids.eq(self.pad_id)[:, None, :]", "ids.cpu().eq(self.pad_id)[:, None, :]")], "parameter_count"),
    "cpu_positions": _v("the positions made on the CPU (torch.arange(T)), in both methods",
                        "tensor_made_on_cpu_in_forward", [(
        "positions = torch.arange(T, device=ids.device)", "positions = torch.arange(T)")], "parameter_count"),
    "mask_cached_at_first_device": _v("the full causal mask made once, on the first call's device, in a plain "
                                      "attribute (sliced per call)", "tensor_made_on_cpu_in_forward", [(FUT,
        "if not hasattr(self, 'causal_mask'):\n"
        "            self.causal_mask = torch.triu(torch.ones(self.context_len, self.context_len, dtype=torch.bool), 1)\n"
        "        future = self.causal_mask[:T, :T]")], "parameter_count"),
    # The notebook calls forward_details at T = 12 first, then its checks at every length on that instance: the
    # visible cells fail on the same checks.
    "mask_cached_at_first_length": _v("the causal mask of the first call kept in a plain attribute and reused",
                                      "state_kept_from_first_call", [(
        FUT, "if not hasattr(self, 'future'):\n"
             "            self.future = " + FUT[len("future = "):] + "\n"
             "        future = self.future")],
        "forward_matches_details", "no_future_weight", "rows_sum_to_one", "future_edit", "padded_keys",
        "parameter_count", *REF),          # kept from the first call: on its device too
    "position_padding_idx": _v("the position table built with padding_idx=pad_id (slot 0's row never trains)", "position_padding_idx",
                               [("self.position_embedding = nn.Embedding(context_len, d_model)",
                                 "self.position_embedding = nn.Embedding(context_len, d_model, padding_idx=pad_id)")],
                               "parameter_count"),
}


def _class_and_init() -> str:
    """The solution cell up to forward_details: the given class line, docstring and __init__."""
    src = solution_source(__file__, SOLUTION_CELL)
    return src[:src.index("    def forward_details(")]

PREAMBLE = "import math\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"

ALTERNATIVES = {
    # Dropout that training switches on (nn.Dropout): the contract does not forbid it (wordlm's tiny_batch_overfit
    # seeds "for models with randomness (dropout)", and every check of the notebook reads eval mode), so it keeps
    # every point: the judge reads values in eval mode, as the notebook's checks do (plan.STATE_CALLS).
    "dropout_in_train_mode": '''
    def __init__(self, vocab_size, context_len, d_model=48, d_k=48, d_v=48, hidden=160, pad_id=0):
        super().__init__()
        self.context_len, self.d_k, self.pad_id = context_len, d_k, pad_id
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.position_embedding = nn.Embedding(context_len, d_model)
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_v, bias=False)
        self.W_O = nn.Linear(d_v, d_model, bias=False)
        self.hidden_layer = nn.Linear(d_model, hidden)
        self.vocab_head = nn.Linear(hidden, vocab_size)
        self.attention_dropout = nn.Dropout(0.1)

    def forward_details(self, ids):
        B, T = ids.shape
        X = self.token_embedding(ids) + self.position_embedding(torch.arange(T, device=ids.device))[None]
        Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        real = ids != self.pad_id
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ids.device), diagonal=1)
        masked_scores = scores.masked_fill(future | (real[:, :, None] & ~real[:, None, :]), float("-inf"))
        weights = self.attention_dropout(torch.softmax(masked_scores, dim=-1))
        messages = weights @ V
        updates = self.W_O(messages)
        contextual = X + updates
        hidden = F.relu(self.hidden_layer(contextual))
        logits_all = self.vocab_head(hidden)
        return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked_scores, weights=weights,
                    messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                    logits_all=logits_all, logits=logits_all[:, -1, :])

    def forward(self, ids):
        return self.forward_details(ids)["logits"]
''',
    "forward_calls_details": '''
    def forward_details(self, ids):
        B, T = ids.shape
        X = self.token_embedding(ids) + self.position_embedding.weight[:T]
        Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)
        scores = torch.einsum("bik,bjk->bij", Q, K) / self.d_k ** 0.5
        real = ids != self.pad_id
        blocked = torch.ones(T, T, dtype=torch.bool, device=ids.device).triu(1) | (real[:, :, None] & ~real[:, None, :])
        masked_scores = scores.masked_fill(blocked, float("-inf"))
        weights = masked_scores.softmax(dim=-1)
        messages = torch.einsum("bij,bjv->biv", weights, V)
        updates = self.W_O(messages)
        contextual = X + updates
        hidden = torch.relu(self.hidden_layer(contextual))
        logits_all = self.vocab_head(hidden)
        return {"X": X, "Q": Q, "K": K, "V": V, "scores": scores, "masked_scores": masked_scores,
                "weights": weights, "messages": messages, "updates": updates, "contextual": contextual,
                "hidden": hidden, "logits_all": logits_all, "logits": logits_all[:, -1]}

    def forward(self, ids):
        return self.forward_details(ids)["logits"]
''',
    "additive_mask_handwritten_softmax": '''
    def _softmax(self, s):
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True)

    def forward_details(self, ids):
        B, T = ids.shape
        X = self.token_embedding(ids) + self.position_embedding(torch.arange(T, device=ids.device))[None]
        Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)
        scores = Q @ K.transpose(1, 2) * (1.0 / math.sqrt(self.d_k))
        pad = (ids == self.pad_id).float()
        future = torch.triu(torch.ones(T, T, device=ids.device), diagonal=1)
        penalty = future[None] + (pad[:, None, :] * (1 - pad[:, :, None]))
        masked_scores = scores - 1e9 * penalty.clamp(max=1)
        weights = self._softmax(masked_scores)
        messages = weights @ V
        updates = self.W_O(messages)
        contextual = X + updates
        hidden = F.relu(self.hidden_layer(contextual))
        logits_all = self.vocab_head(hidden)
        return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked_scores, weights=weights,
                    messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                    logits_all=logits_all, logits=logits_all[:, -1, :])

    def forward(self, ids):
        T = ids.shape[1]
        X = self.token_embedding(ids) + self.position_embedding(torch.arange(T, device=ids.device))[None]
        q = self.W_Q(X[:, -1])                                              # (B, d_k)
        s = torch.einsum("bk,btk->bt", q, self.W_K(X)) / math.sqrt(self.d_k)
        s = s - 1e9 * (ids == self.pad_id).float()
        w = self._softmax(s)
        msg = torch.einsum("bt,btv->bv", w, self.W_V(X))
        h = F.relu(self.hidden_layer(X[:, -1] + self.W_O(msg)))
        return self.vocab_head(h)
''',
    "where_bool_masks": '''
    def forward_details(self, ids):
        B, T = ids.shape
        if not hasattr(self, "tril"):        # a registered mask buffer must not upset weight loading
            self.register_buffer("tril", torch.tril(torch.ones(self.context_len, self.context_len, dtype=torch.bool)))
        X = self.token_embedding(ids) + self.position_embedding(torch.arange(T, device=ids.device)).unsqueeze(0)
        Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)
        scores = torch.matmul(Q, K.mT) / math.sqrt(K.shape[-1])
        allowed = self.tril[:T, :T][None].expand(B, T, T).clone()
        real = ids.ne(self.pad_id)
        allowed &= real[:, None, :] | ~real[:, :, None]
        masked_scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
        weights = torch.softmax(masked_scores, -1)
        messages = torch.bmm(weights, V)
        updates = self.W_O(messages)
        contextual = updates + X
        hidden = F.relu(self.hidden_layer(contextual))
        logits_all = self.vocab_head(hidden)
        return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked_scores, weights=weights,
                    messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                    logits_all=logits_all, logits=logits_all[:, -1, :])

    def forward(self, ids):
        return self.forward_details(ids)["logits_all"][:, -1, :]
''',
    "weight_indexing_additive_minus_1e4": '''
    def _attend(self, X, ids, queries):
        T = ids.shape[1]
        Q, K, V = self.W_Q(X[:, queries]), self.W_K(X), self.W_V(X)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)
        qpos = torch.arange(T, device=ids.device)[queries].reshape(-1, 1)
        real = (ids != self.pad_id).float()
        future = (torch.arange(T, device=ids.device)[None, :] > qpos).float()                    # (Tq, T)
        padded = (1 - real)[:, None, :] * real[:, queries].reshape(ids.shape[0], -1, 1)
        masked = scores + (-1e4) * torch.clamp(future[None] + padded, max=1.0)
        return scores, masked, torch.softmax(masked, dim=-1), V

    def forward_details(self, ids):
        T = ids.shape[1]
        X = self.token_embedding.weight[ids] + self.position_embedding.weight[:T].unsqueeze(0)
        scores, masked_scores, weights, V = self._attend(X, ids, slice(None))
        messages = weights @ V
        updates = self.W_O(messages)
        contextual = X + updates
        hidden = F.relu(self.hidden_layer(contextual))
        logits_all = self.vocab_head(hidden)
        return dict(X=X, Q=self.W_Q(X), K=self.W_K(X), V=V, scores=scores, masked_scores=masked_scores,
                    weights=weights, messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                    logits_all=logits_all, logits=logits_all[:, -1, :])

    def forward(self, ids):
        T = ids.shape[1]
        X = self.token_embedding.weight[ids] + self.position_embedding.weight[:T].unsqueeze(0)
        _, _, w, V = self._attend(X, ids, slice(T - 1, T))
        c = X[:, -1] + self.W_O((w @ V)[:, 0])
        return self.vocab_head(F.relu(self.hidden_layer(c)))
''',
    "loop_over_positions": '''
    def forward_details(self, ids):
        B, T = ids.shape
        X = self.token_embedding(ids) + self.position_embedding(torch.arange(T, device=ids.device))
        Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)
        scores = Q @ K.transpose(-2, -1) / self.d_k ** 0.5
        rows = []
        for i in range(T):                                   # one query row at a time
            s = scores[:, i, :].clone()
            s[:, i + 1:] = float("-inf")
            real_query = ids[:, i] != self.pad_id
            s = torch.where(real_query[:, None] & (ids == self.pad_id), torch.full_like(s, float("-inf")), s)
            rows.append(s)
        masked_scores = torch.stack(rows, dim=1)
        weights = torch.softmax(masked_scores, dim=-1)
        messages = weights @ V
        updates = self.W_O(messages)
        contextual = X + updates
        hidden = torch.relu(self.hidden_layer(contextual))
        logits_all = self.vocab_head(hidden)
        return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked_scores, weights=weights,
                    messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                    logits_all=logits_all, logits=logits_all[:, -1, :])

    def forward(self, ids):
        return self.forward_details(ids)["logits"]
''',
}


def mutate(solution_src: str, name: str) -> str:
    return apply_edits(solution_src, name, MUTANTS[name])


def alternative(name: str) -> str:
    return PREAMBLE + _class_and_init() + ALTERNATIVES[name]


# Slips no catalogue entry holds, named by reproduction (grammar.py) or by what the runs show (observed.py): each
# with the id the judge must give it, beside a near miss that nothing reproduces (None: "no known pattern").
# tests/test_lm_grammar.py runs each in-process and asks the grammar alone.
QKV = "Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)"
FWD_QKV = "q_last, K, V = self.W_Q(X[:, -1:, :]), self.W_K(X), self.W_V(X)"
FWD_CTX = "contextual_last = X[:, -1, :] + self.W_O(message_last).squeeze(1)"
FWD_TAIL = "return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))"
FWD_START = "_, T = ids.shape\n"
PAD_Q = "padded_key_for_real_query = (~real[:, None, :]) & real[:, :, None]"
FILL = 'masked_scores = scores.masked_fill(attention_mask, float("-inf"))'
SOFTMAX = "weights = F.softmax(masked_scores, dim=-1)"
KEPT = ("if getattr(self, '_kept', None) is not None:\n            return self._kept{}\n"
        "        self._kept = self.forward_details(ids)['logits']\n        return self._kept\n        ")
X_SUM = "X = self.token_embedding(ids) + self.position_embedding(positions)[None, :, :]"
FWD_SCALE = "scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(self.d_k)"
REPRODUCED = {
    "pad_slots_without_position_rows": _v("position rows zeroed at the padding slots (blind set 13's m15)",
                                          "pad_slots_without_position_rows", [(X_SUM, X_SUM.replace(
                                              "[None, :, :]", "[None, :, :] * ids.ne(self.pad_id)[..., None]"))]),
    "pad_slots_with_half_position_rows": _v("near miss: position rows halved at the padding slots", None, [(
        X_SUM, X_SUM.replace("[None, :, :]", "[None, :, :] * (1 + ids.ne(self.pad_id)[..., None]) / 2"))]),
    "forward_no_scale_no_padding_mask": _v("forward neither scales nor masks the padded keys (blind set 14's m25)",
                                           "forward_scale_none+forward_ignores_padding", [
        (FWD_SCALE, "scores_last = q_last @ K.transpose(-2, -1)"),
        ('scores_last = scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], float("-inf"))', "pass")]),
    "forward_scale_window_length": _v("forward divides by sqrt(T) (blind set 13's m22)", "forward_scale_window_length",
                                      [(FWD_SCALE, "scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(T)")]),
    "messages_from_transposed_weights": _v("weights^T V in forward_details (blind set 13's m29)",
                                           "messages_from_transposed_weights",
                                           [("messages = weights @ V", "messages = weights.transpose(-2, -1) @ V")]),
    "messages_from_half_transposed_weights": _v("near miss: (weights + weights^T) / 2 V", None, [(
        "messages = weights @ V", "messages = (weights + weights.transpose(-2, -1)) / 2 @ V")]),
    "token_rows_scaled": _v("token rows times sqrt(d_model), in both methods (blind set 12's m18)", "token_rows_scaled",
                            [(X_SUM, X_SUM.replace("self.token_embedding(ids)", "self.token_embedding(ids) * math.sqrt("
                                                   "self.token_embedding.embedding_dim)"))]),
    "token_rows_scaled_by_3": _v("near miss: token rows times 3", None,
                                 [(X_SUM, X_SUM.replace("self.token_embedding(ids)", "self.token_embedding(ids) * 3"))]),
    "forward_query_from_first_slot_only": _v("forward's query X[:, :1], its residual X[:, -1] (blind set 12's m19)",
                                             "forward_query_from_first_slot_only",
                                             [(FWD_QKV, FWD_QKV.replace("self.W_Q(X[:, -1:, :])", "self.W_Q(X[:, :1, :])"))]),
    "forward_query_from_second_slot": _v("near miss: forward's query X[:, 1:2], its residual X[:, -1]", None,
                                         [(FWD_QKV, FWD_QKV.replace("self.W_Q(X[:, -1:, :])", "self.W_Q(X[:, 1:2, :])"))]),
    "fixed_sqrt_48": _v("the scale hard-coded as sqrt(48), the default d_k", "scaled_by_fixed_sqrt_48",
                        [(SCALE, "/ math.sqrt(48)")]),
    "query_from_W_K": _v("queries made with W_K, in both methods", "lm_query_from_W_K",
                         [(QKV, QKV.replace("self.W_Q(X)", "self.W_K(X)")),
                          (FWD_QKV, FWD_QKV.replace("self.W_Q(X[:, -1:, :])", "self.W_K(X[:, -1:, :])"))]),
    "forward_query_from_W_K": _v("forward's last query made with W_K", "forward_query_from_W_K",
                                 [(FWD_QKV, FWD_QKV.replace("self.W_Q(X[:, -1:, :])", "self.W_K(X[:, -1:, :])"))]),
    "forward_query_from_W_V": _v("near miss: forward's last query made with W_V (d_v != d_k: it raises)", None,
                                 [(FWD_QKV, FWD_QKV.replace("self.W_Q(X[:, -1:, :])", "self.W_V(X[:, -1:, :])"))]),
    "scale_precedence": _v("`/ (self.d_k ** 1/2)` in both methods: d_k / 2", "scale_precedence",
                           [(SCALE, "/ (self.d_k ** 1/2)")]),
    "scale_precedence_unbracketed": _v("`scores / self.d_k ** 1/2`: scores / (2 d_k)", "scale_precedence_unbracketed",
                                       [(SCALE, "/ self.d_k ** 1/2")]),
    "scale_third": _v("near miss: d_k / 3, right at the scaling run's d_k = 9 alone", None, [(SCALE, "/ (self.d_k / 3)")]),
    "fixed_sqrt_47": _v("near miss: a fixed sqrt(47)", None, [(SCALE, "/ math.sqrt(47)")]),
    "scores_transposed": _v("K Q^T in forward_details", "scores_transposed",
                            [("scores = Q @ K.transpose(-2, -1)", "scores = K @ Q.transpose(-2, -1)")]),
    "scores_from_keys_only": _v("K K^T in forward_details: its queries are W_K's", "lm_query_from_W_K",
                                [("scores = Q @ K.transpose(-2, -1)", "scores = K @ K.transpose(-2, -1)")]),
    "scores_from_scaled_queries": _v("near miss: (0.7 Q) K^T", None,
                                     [("scores = Q @ K.transpose(-2, -1)", "scores = (0.7 * Q) @ K.transpose(-2, -1)")]),
    "values_from_token_rows": _v("values from the token rows only, in both methods", "values_from_token_rows",
                                 [(QKV, QKV.replace("self.W_V(X)", "self.W_V(self.token_embedding(ids))")),
                                  (FWD_QKV, FWD_QKV.replace("self.W_V(X)", "self.W_V(self.token_embedding(ids))"))]),
    "values_from_half_positions": _v("near miss: values from the token rows and half the position rows", None, [
        (QKV, QKV.replace("self.W_V(X)", "self.W_V(self.token_embedding(ids) + 0.5 * self.position_embedding("
                                         "positions))"))]),
    "padding_mask_batch_axis": _v("pad[None] & real[..., None]: the batch axis read as the query axis",
                                  "padding_mask_batch_axis",
                                  [(PAD_Q, "padded_key_for_real_query = (~real)[None] & real[..., None]")]),
    "padding_of_first_window": _v("near miss: every window given the first window's padding", None,
                                  [(PAD_Q, "padded_key_for_real_query = (~real[:1, None, :]) & real[:, :, None]")]),
    "pad_all_queries_fill_minus_1e9": _v("padded keys masked for every query, filled with -1e9",
                                         "padding_mask_nan_rows+mask_filled_with_minus_1e9", [
        (PAD_Q, "padded_key_for_real_query = (~real[:, None, :]).expand(-1, T, -1)"),
        (FILL, "masked_scores = scores.masked_fill(attention_mask, -1e9)")]),
    "pad_all_queries_fill_minus_1": _v("near miss: the same, filled with -1", None, [
        (PAD_Q, "padded_key_for_real_query = (~real[:, None, :]).expand(-1, T, -1)"),
        (FILL, "masked_scores = scores.masked_fill(attention_mask, -1.0)")]),
    "softmax_without_max": _v("exp(s) / sum exp(s), in both methods", "softmax_without_max", [
        (SOFTMAX, "weights = torch.exp(masked_scores) / torch.exp(masked_scores).sum(-1, keepdim=True)"),
        (MESSAGE, "message_last = (torch.exp(scores_last) / torch.exp(scores_last).sum(-1, keepdim=True)) @ V")]),
    "softmax_with_slack": _v("near miss: exp(s - max) / (sum + 1e-3)", None, [
        (SOFTMAX, "e = torch.exp(masked_scores - masked_scores.amax(-1, keepdim=True))\n"
                  "        weights = e / (e.sum(-1, keepdim=True) + 1e-3)")]),
    "residual_token_rows_only": _v("the residual adds the token rows only, in both methods",
                                   "residual_token_rows_only", [
        ("contextual = X + updates", "contextual = self.token_embedding(ids) + updates"),
        (FWD_CTX, FWD_CTX.replace("X[:, -1, :]", "self.token_embedding(ids[:, -1])"))]),
    "residual_token_rows_half_update": _v("near miss: token rows plus half the update", None, [
        ("contextual = X + updates", "contextual = self.token_embedding(ids) + 0.5 * updates")]),
    "mlp_reads_X": _v("the hidden layer reads X, in both methods", "mlp_reads_X", [
        ("hidden = F.relu(self.hidden_layer(contextual))", "hidden = F.relu(self.hidden_layer(X))"),
        ("F.relu(self.hidden_layer(contextual_last))", "F.relu(self.hidden_layer(X[:, -1, :]))")]),
    "mlp_reads_half_update": _v("near miss: the hidden layer reads X plus half the update", None, [
        ("hidden = F.relu(self.hidden_layer(contextual))", "hidden = F.relu(self.hidden_layer(X + 0.5 * updates))"),
        ("F.relu(self.hidden_layer(contextual_last))",
         "F.relu(self.hidden_layer(X[:, -1, :] + 0.5 * (contextual_last - X[:, -1, :])))")]),
    "forward_query_from_first_slot": _v("forward's query and residual from X[:, 0]", "forward_query_from_first_slot",
                                        [("self.W_Q(X[:, -1:, :])", "self.W_Q(X[:, :1, :])"),
                                         ("contextual_last = X[:, -1, :]", "contextual_last = X[:, 0, :]")]),
    "forward_reads_only_own_value": _v("forward's message is the last value", "forward_reads_only_own_value",
                                       [(MESSAGE, "message_last = V[:, -1:, :]")]),
    "forward_reads_first_value": _v("near miss: forward's message is the first value", None,
                                    [(MESSAGE, "message_last = V[:, :1, :]")]),
    "forward_no_position_rows": _v("forward adds no position rows", "forward_no_position_rows",
                                   [(FWD_QKV, "X = self.token_embedding(ids)\n        " + FWD_QKV)]),
    "forward_position_rows_halved": _v("near miss: forward adds half the position rows", None, [
        (FWD_QKV, "X = self.token_embedding(ids) + 0.5 * self.position_embedding(positions)\n        " + FWD_QKV)]),
    "forward_no_relu": _v("forward's hidden layer without ReLU", "forward_no_relu",
                          [(FWD_TAIL, "return self.vocab_head(self.hidden_layer(contextual_last))")]),
    "forward_gelu": _v("forward's hidden layer with GELU", "forward_gelu_for_relu",
                       [(FWD_TAIL, "return self.vocab_head(F.gelu(self.hidden_layer(contextual_last)))")]),
    "forward_leaky_relu": _v("near miss: forward's hidden layer with a leaky ReLU", None,
                             [(FWD_TAIL, "return self.vocab_head(F.leaky_relu(self.hidden_layer(contextual_last), "
                                         "0.1))")]),
    "forward_returns_every_position": _v("forward returns logits_all", "forward_returns_every_position",
                                         [(FWD_START, "return self.forward_details(ids)['logits_all']\n        " +
                                           FWD_START)]),
    "forward_returns_later_positions": _v("near miss: forward returns logits_all[:, 1:]", None,
                                          [(FWD_START, "return self.forward_details(ids)['logits_all'][:, 1:]\n"
                                                       "        " + FWD_START)]),
    "forward_returns_earlier_result": _v("forward returns the logits of its first call",
                                         "forward_returns_earlier_result",
                                         [(FWD_START, KEPT.format("") + FWD_START)]),
    "embeddings_cut_from_graph": _v("forward's X detached", "embeddings_cut_from_graph",
                                    [(FWD_QKV, "X = X.detach()\n        " + FWD_QKV)]),
    "token_rows_cut_from_graph": _v("near miss: only forward's token rows detached", None, [
        (FWD_QKV, "X = X - self.token_embedding(ids) + self.token_embedding(ids).detach()\n        " + FWD_QKV)]),
    "residual_detached": _v("the residual adds X.detach(), in both methods", "residual_detached",
                            [("contextual = X + updates", "contextual = X.detach() + updates"),
                             (FWD_CTX, FWD_CTX.replace("X[:, -1, :] +", "X[:, -1, :].detach() +"))]),
    "values_input_detached": _v("near miss: the values read X.detach(), in both methods", None,
                                [(QKV, QKV.replace("self.W_V(X)", "self.W_V(X.detach())")),
                                 (FWD_QKV, FWD_QKV.replace("self.W_V(X)", "self.W_V(X.detach())"))]),
    "W_O_weight_not_transposed": _v("messages @ W_O.weight, without .T", "W_O_weight_not_transposed",
                                    [("updates = self.W_O(messages)", "updates = messages @ self.W_O.weight")]),
    "W_V_weight_as_output": _v("near miss: messages @ W_V.weight (it fits: no failed product)", None,
                               [("updates = self.W_O(messages)", "updates = messages @ self.W_V.weight")]),
    "values_from_W_K": _v("values made by W_K, in both methods", "values_not_from_W_V",
                          [(QKV, QKV.replace("self.W_V(X)", "self.W_K(X)")),
                           (FWD_QKV, FWD_QKV.replace("self.W_V(X)", "self.W_K(X)"))]),
    "values_cut_to_d_k": _v("near miss: W_V's output cut to d_k columns (W_V is used)", None,
                            [(QKV, QKV.replace("self.W_V(X)", "self.W_V(X)[..., :self.d_k]"))]),
    "forward_returns_earlier_result_moved": _v("near miss: the first call's logits plus 1e-3", None,
                                               [(FWD_START, KEPT.format(" + 1e-3") + FWD_START)]),
    # blind set 8's unnamed slips (m13, m20, m32, m25, m31, m16, m30), each with a near miss
    # a padded query that reads only itself (the release leaves those rows free) beside a slip after the weights:
    # named as the slip alone (blind set 8's m35, unnamed while padded rows had to equal the reference's)
    "mlp_reads_X_padded_queries_read_themselves": _v("the hidden layer reads X; a padded query reads only itself",
                                                     "mlp_reads_X", [
        (PAD_MASK, PAD_MASK + " | ((~real[:, :, None]) & ~torch.eye(T, dtype=torch.bool, device=ids.device))"),
        ("hidden = F.relu(self.hidden_layer(contextual))", "hidden = F.relu(self.hidden_layer(X))"),
        ("F.relu(self.hidden_layer(contextual_last))", "F.relu(self.hidden_layer(X[:, -1, :]))")]),
    "key_layer_is_query_layer": _v("self.W_K = self.W_Q in __init__ (blind set 8's m50)", "layers_shared",
                                   [("self.W_K = nn.Linear(d_model, d_k, bias=False)", "self.W_K = self.W_Q")]),
    "key_layer_copied_from_query": _v("near miss: W_K a new layer whose weight is W_Q's (two parameters)", None, [
        ("self.W_K = nn.Linear(d_model, d_k, bias=False)",
         "self.W_K = nn.Linear(d_model, d_k, bias=False)\n        self.W_K.weight.data.copy_(self.W_Q.weight.data)")]),
    "masks_joined_with_and": _v("future & padded keys (blind set 9's m17)", "nothing_masked",
                                [(PAD_MASK, PAD_MASK.replace(" | ", " & "))]),
    # no edit of the grammar fits all-NaN weights; the masked scores it returns show the slip (observed.py)
    "additive_mask_of_nan": _v("mask.float() * -inf added (0 * -inf: NaN at every allowed key)", "additive_mask_nan", [
        (FILL, 'masked_scores = scores + attention_mask.float() * float("-inf")')]),
    "masks_joined_with_xor": _v("near miss: future ^ padded keys", None, [(PAD_MASK, PAD_MASK.replace(" | ", " ^ "))]),
    "gelu_for_relu": _v("GELU for the ReLU, in both methods", "gelu_for_relu", [
        ("hidden = F.relu(self.hidden_layer(contextual))", "hidden = F.gelu(self.hidden_layer(contextual))"),
        (FWD_TAIL, FWD_TAIL.replace("F.relu", "F.gelu"))]),
    "silu_for_relu": _v("near miss: SiLU for the ReLU, in both methods", None, [
        ("hidden = F.relu(self.hidden_layer(contextual))", "hidden = F.silu(self.hidden_layer(contextual))"),
        (FWD_TAIL, FWD_TAIL.replace("F.relu", "F.silu"))]),
    "causal_mask_inverted": _v("the allowed triangle (tril) used as the blocked one", "causal_mask_inverted",
                               [(FUT, FUT.replace("torch.triu(", "torch.tril(").replace(", diagonal=1", ""))]),
    "causal_mask_inverted_shifted": _v("near miss: tril(diagonal=1) as the blocked part", None,
                                       [(FUT, FUT.replace("torch.triu(", "torch.tril("))]),
    "mask_inverted": _v("torch.where's branches swapped", "mask_inverted", [
        (FILL, 'masked_scores = torch.where(attention_mask, scores, torch.full_like(scores, float("-inf")))')]),
    "mask_inverted_fill_minus_5": _v("near miss: the branches swapped, the allowed scores set to -5", None, [
        (FILL, "masked_scores = torch.where(attention_mask, scores, torch.full_like(scores, -5.0))")]),
    "forward_excludes_own_key": _v("forward's keys and values from the earlier slots only", "forward_excludes_own_key", [
        (FWD_QKV, "q_last, K, V = self.W_Q(X[:, -1:, :]), self.W_K(X[:, :-1]), self.W_V(X[:, :-1])"),
        ("ids.eq(self.pad_id)[:, None, :]", "ids[:, :-1].eq(self.pad_id)[:, None, :]")]),
    "forward_excludes_first_key": _v("near miss: forward's keys and values without the first slot", None, [
        (FWD_QKV, "q_last, K, V = self.W_Q(X[:, -1:, :]), self.W_K(X[:, 1:]), self.W_V(X[:, 1:])"),
        ("ids.eq(self.pad_id)[:, None, :]", "ids[:, 1:].eq(self.pad_id)[:, None, :]")]),
    "forward_residual_from_first_slot": _v("forward's residual X[:, 0]", "forward_residual_from_first_slot",
                                           [(FWD_CTX, FWD_CTX.replace("X[:, -1, :]", "X[:, 0, :]"))]),
    "forward_residual_from_mean": _v("near miss: forward's residual the mean of X over the slots", None,
                                     [(FWD_CTX, FWD_CTX.replace("X[:, -1, :]", "X.mean(1)"))]),
    "forward_query_lost_time_axis": _v("forward's query X[:, -1] (no time axis)", "forward_broadcast_over_batch",
                                       [(FWD_QKV, FWD_QKV.replace("X[:, -1:, :]", "X[:, -1, :]"))]),
    "layer_norm_on_X": _v("an nn.LayerNorm on X before Q, K and V, in both methods (blind set 9's m23)",
                          "layer_norm_added", [
        ("self.vocab_head = nn.Linear(hidden, vocab_size)",
         "self.vocab_head = nn.Linear(hidden, vocab_size)\n        self.norm = nn.LayerNorm(d_model)"),
        (QKV, QKV.replace("(X)", "(self.norm(X))")),
        (FWD_QKV, "q_last, K, V = self.W_Q(self.norm(X)[:, -1:, :]), self.W_K(self.norm(X)), self.W_V(self.norm(X))")]),
    "forward_update_not_squeezed": _v("forward's update (B, 1, d) added to X[:, -1] (blind set 9's m18)",
                                      "forward_broadcast_over_batch",
                                      [(FWD_CTX, FWD_CTX.replace(".squeeze(1)", ""))]),
    "forward_query_from_mean": _v("near miss: forward's query the mean of X over the slots", None,
                                  [(FWD_QKV, FWD_QKV.replace("X[:, -1:, :]", "X.mean(1, keepdim=True)"))]),
    "forward_keys_values_cached": _v("forward keeps K and V of its first eval call of a shape and reuses them",
                                     "forward_returns_earlier_result", [
        (FWD_QKV, "q_last = self.W_Q(X[:, -1:, :])\n"
                  "        kept = getattr(self, '_kv', None)\n"
                  "        if not self.training and kept is not None and kept[0].shape[:2] == X.shape[:2]:\n"
                  "            K, V = kept\n"
                  "        else:\n"
                  "            K, V = self.W_K(X), self.W_V(X)\n"
                  "            self._kv = (K, V) if not self.training else None")]),
}
