"""Submissions for `Head`: typical mistakes as edits of the solution cell, and correct alternatives.

Each mistake lists the checks it must fail - no more, no fewer - so every check
is proven both ways: the solution passes it, and a submission breaking exactly
that property loses it. Each alternative is a correct head written differently;
a fair grader gives it every point.
"""
from attnkit.toolkit.corpus import RESTART_PROFILER, STOP_PROFILER, UNREGISTER_STAND_INS, apply_edits, lines as _lines, \
    mutant as _m, modes_popped as _modes_popped, variant as _v, contract_cell, solution_source

SCORES = "scores = q @ k.transpose(-2, -1) / k.shape[-1]**0.5     # (B, T, T)"
MASK = "scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))"
SOFTMAX = "A = F.softmax(scores, dim=-1)                           # (B, T, T)"
BUFFER = "self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max)))"
IF_CAUSAL = "        if self.causal:"
QKV = "q, k, v = self.query(x), self.key(x), self.value(x)"
RETURN = "return A @ v "


REF = ("reference_agreement",)
ALONGSIDE = REF      # what any wrong answer may lose beside the check it isolates (attnkit.toolkit.corpus)
MUTANTS = {
    "mask_after_softmax": _m("weights zeroed after the softmax instead of -inf before it",
                             [(MASK, "pass"), (SOFTMAX, "A = F.softmax(scores, dim=-1) * (self.tril[:T, :T] if self.causal else 1)")],
                             "simplex_rows", "convex_hull", "causality_perturbation", "causality_gradient", "short_sequence",
                             *REF),          # rows summing to less than 1: outside the hull of values close together
    "no_scale": _m("no 1/sqrt(d_k) scaling", [(" / k.shape[-1]**0.5", "")], "scaling", *REF),
    "divide_by_dk": _m("scores divided by d_k instead of sqrt(d_k)", [("k.shape[-1]**0.5", "k.shape[-1]")], "scaling", *REF),
    "scale_by_model_width": _m("scaled by the model width d instead of d_head", [("k.shape[-1]**0.5", "d**0.5")], "scaling", *REF),
    "softmax_wrong_axis": _m("softmax over the query axis", [("F.softmax(scores, dim=-1)", "F.softmax(scores, dim=-2)")],
                             "simplex_rows", "convex_hull", "causality_perturbation", "causality_gradient",
                             "scaling", "short_sequence", *REF),
    "future_triangle": _m("mask of the wrong triangle: attends to the future", [("self.tril[:T, :T] == 0", "self.tril[:T, :T] == 1")],
                          "simplex_rows", "lower_triangular", "causality_perturbation", "causality_gradient",
                          "convex_hull", "positive_weights", "gradient_flow", "scaling", "short_sequence", *REF),
    "diagonal_masked": _m("diagonal masked out (NaN first row)", [("torch.tril(torch.ones(T_max, T_max))", "torch.tril(torch.ones(T_max, T_max), diagonal=-1)")],
                          "simplex_rows", "convex_hull", "positive_weights", "causality_perturbation", "causality_gradient",
                          "scaling", "short_sequence", "mask_buffer", "gradient_flow", "lower_triangular", *REF),
    "mask_not_sliced": _m("mask not sliced for T < T_max", [("self.tril[:T, :T] == 0", "self.tril == 0")], "short_sequence"),
    "causal_flag_ignored": _m("causal flag ignored: always masked", [("if self.causal:", "if True:")],
                              "noncausal_unmasked", "equivariance", *REF),
    "mask_never_applied": _m("causal mask never applied", [("if self.causal:", "if False:")],
                             "lower_triangular", "causality_perturbation", "causality_gradient", "short_sequence", *REF),
    "scores_detached": _m("scores detached inside the computation", [("A = F.softmax(scores, dim=-1)", "A = F.softmax(scores.detach(), dim=-1)")],
                          "gradient_flow"),
    "mask_as_parameter": _m("mask stored as a trainable parameter", [(BUFFER, "self.tril = nn.Parameter(torch.tril(torch.ones(T_max, T_max)))")],
                            "mask_buffer"),
    "A_not_detached": _m("self.A keeps the graph", [("self.A = A.detach()", "self.A = A")], "interface"),
    "biased_projections": _m("projections with a bias", [("bias=False)", "bias=True)")],
                             "interface", "convex_hull", "scaling", *REF),
    "dropout_on_weights": _m("dropout on the attention weights", [("self.A = A.detach()", "A = F.dropout(A, 0.5, training=True); self.A = A.detach()")],
                             "simplex_rows", "causality_perturbation", "convex_hull", "short_sequence", "equivariance",
                             "noncausal_unmasked", "positive_weights", *REF),
    "running_mean": _m("content-blind running mean", [(SCORES, "scores = torch.zeros(B, T, T, device=x.device)")],
                       "equivariance", "scaling", "gradient_flow", *REF),
    "mask_filled_with_zero": _m("mask filled with 0 instead of -inf", [("float('-inf'))", "0.0)")],
                                "lower_triangular", "causality_perturbation", "causality_gradient",
                                "short_sequence", *REF),
    "weights_stored_before_masking": _m("self.A stored before masking", [(
        "self.A = A.detach()", "self.A = F.softmax(q @ k.transpose(-2, -1) / k.shape[-1]**0.5, dim=-1).detach()")],
        "lower_triangular", *REF),
    "scores_transposed": _m("scores transposed (K Q^T)", [("q @ k.transpose(-2, -1)", "k @ q.transpose(-2, -1)")],
                            *REF),
    "key_from_query": _m("key computed with the query projection",
                         [("q, k, v = self.query(x), self.key(x), self.value(x)",
                           "q, k, v = self.query(x), self.query(x), self.value(x)")], "gradient_flow", *REF),
    "banned_fused_call": _m("F.scaled_dot_product_attention for the output", [(
        "return A @ v ", "return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal) ")], "interface"),
    # Walking the seed's Head line by line (issue 13): defaults, operands, layers, buffer, fill, slice, axis,
    # what is stored, what is returned, what can still train.
    "causal_default_false": _m("the causal flag defaults to False", [(
        "def __init__(self, d, d_head, T_max, causal=True)", "def __init__(self, d, d_head, T_max, causal=False)")],
        "interface"),
    "projections_shared": _m("the key layer is the query layer", [
        ("self.key   = nn.Linear(d, d_head, bias=False)", "self.key   = None"),
        ("self.value = nn.Linear(d, d_head, bias=False)", "self.value = nn.Linear(d, d_head, bias=False)\n"
                                                          "        self.key = self.query")],
        "reference_agreement"),
    "value_from_wrong_layer": _m("values computed with the query layer", [(QKV, "q, k, v = self.query(x), self.key(x), self.query(x)")],
                                 "convex_hull", "gradient_flow", *REF),
    "projections_swapped": _m("query and value layers swapped", [(QKV, "q, k, v = self.value(x), self.key(x), self.query(x)")],
                              "convex_hull", "scaling", *REF),
    "mask_fill_positive": _m("mask filled with +1e9 instead of -inf", [("float('-inf'))", "1e9)")],
                             "lower_triangular", "causality_perturbation", "causality_gradient", "short_sequence",
                             "gradient_flow", "positive_weights", *REF),
    "softmax_over_batch": _m("F.softmax without dim= (dim 0 for a 3-D tensor)", [("F.softmax(scores, dim=-1)", "F.softmax(scores)")],
                             "simplex_rows", "convex_hull", "lower_triangular", "causality_perturbation",
                             "causality_gradient", "gradient_flow", "scaling", "short_sequence", *REF),
    "scale_multiplied": _m("scores multiplied by sqrt(d_k)", [("k.shape[-1]**0.5", "k.shape[-1]**-0.5")], "scaling", *REF),
    "mask_upper_triangle": _m("the buffer is torch.triu", [(BUFFER, BUFFER.replace("torch.tril(", "torch.triu("))],
                              "mask_buffer", "lower_triangular", "causality_perturbation", "causality_gradient",
                              "positive_weights", "scaling", "short_sequence", *REF),
    "softmax_not_normalised": _m("exponentials never normalised", [(SOFTMAX, "A = scores.exp()")],
                                 "simplex_rows", "convex_hull", *REF),
    "returned_weights": _m("forward returns A", [(RETURN, "return A ")],
                           "interface", "convex_hull", "causality_gradient", "gradient_flow", "equivariance",
                           "short_sequence", *REF),
    "stored_scores": _m("self.A holds the masked scores", [("self.A = A.detach()", "self.A = scores.detach()")],
                        "simplex_rows", "positive_weights", "lower_triangular", "scaling", *REF),   # its causal=False weights are
                        # not 0 anywhere: nothing is masked there, the one slip is what it stores (issue 22)
    "output_detached": _m("the output detached from the graph", [(RETURN, "return (A @ v).detach() ")],
                          "gradient_flow", "causality_gradient"),
    "future_cancelled_in_graph": _m("a softmax over the whole row, then masked and renormalised", [
        (MASK, "pass"), (SOFTMAX, "A = F.softmax(scores, dim=-1)\n        if self.causal:\n"
                                  "            A = A * self.tril[:T, :T]\n            A = A / A.sum(-1, keepdim=True)")],
        "causality_perturbation"),
    "output_float64": _m("the output returned in float64", [(RETURN, "return (A @ v).double() ")], "interface"),
    "input_detached": _m("the input detached at the top of forward", [(QKV, "x = x.detach()\n        " + QKV)],
                         "causality_gradient"),
    "mask_sliced_wrong": _m("mask cut from the bottom-left corner, tril[-T:, :T]", [("self.tril[:T, :T]", "self.tril[-T:, :T]")],
                            "short_sequence"),
    "mask_not_registered": _m("mask kept as a plain tensor attribute", [(BUFFER, "self.tril = torch.tril(torch.ones(T_max, T_max))")],
                              "mask_buffer"),
    "mask_buffer_misnamed": _m("mask registered as `mask`", [(BUFFER, BUFFER.replace("'tril'", "'mask'")),
                                                              ("self.tril[:T, :T]", "self.mask[:T, :T]")], "mask_buffer"),
    "stored_exponentials": _m("hand-written softmax, self.A stores the exponentials", [
        (SOFTMAX, "e = scores.exp()\n        A = e / e.sum(-1, keepdim=True)"), ("self.A = A.detach()", "self.A = e.detach()")],
        "simplex_rows", *REF),
    "residual_inside_head": _m("forward returns A @ v + v", [(RETURN, "return A @ v + v ")], "convex_hull", *REF),
    "mask_band": _m("a local window: positions more than 3 steps back masked too",
                    [("self.tril[:T, :T] == 0", "self.tril[:T, :T].triu(-3) == 0")], "positive_weights", *REF),
    "noncausal_zero_fill": _m("causal=False fills the future with 0", [(IF_CAUSAL + "\n            " + MASK,
                              "        scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf') if self.causal else 0.0)")],
                              "equivariance", *REF),
    # blind set 9's m17 (caught by nothing then: the judge ran eval mode and compared nothing of it)
    "mask_only_in_training": _m("the mask applied only in training mode", [(
        IF_CAUSAL, IF_CAUSAL.replace("if self.causal:", "if self.causal and self.training:"))], *REF),
    # blind set 8's m38 divided inside `if self.causal:` (a variant until then, told only what was measured)
    "noncausal_unscaled": _m("with causal=False, the scores not scaled", [(
        SCORES, "scores = q @ k.transpose(-2, -1) / (k.shape[-1]**0.5 if self.causal else 1)")], "scaling", *REF),
    "noncausal_stored_masked": _m("self.A stored times the mask", [("self.A = A.detach()", "self.A = (A * self.tril[:T, :T]).detach()")],
                                  "noncausal_unmasked", *REF),
    "global_max_subtracted": _m("the largest score of the whole batch subtracted (as a float) for a stable softmax",
                                [(SCORES, SCORES + "\n        scores = scores - scores.max().item()")],
                                "causality_perturbation"),   # .item(): no gradient from the future, only its bits
    "kept_from_first_call": _m("the mask of the first call kept and reused (built for the first T)", [(
        MASK, "if not hasattr(self, 'mask'):\n                self.mask = self.tril[:T, :T] == 0\n"
              "            scores = scores.masked_fill(self.mask, float('-inf'))")], "short_sequence"),
    "softmax_overflow": _m("exp() without subtracting the max, the future removed by multiplying with the mask", [
        (MASK, "pass"), (SOFTMAX, "e = scores.exp() * (self.tril[:T, :T] if self.causal else 1)\n"
                                  "        A = e / e.sum(-1, keepdim=True)")], "simplex_rows"),   # inf * 0: NaN
    "buffer_changed_by_forward": _m("the `tril` buffer turned into a 0/-inf mask in place by every call", [(
        MASK, "self.tril.masked_fill_(self.tril == 0, float('-inf')).masked_fill_(self.tril == 1, 0.0)\n"
              "            scores = scores + self.tril[:T, :T]")],
        "mask_buffer", "causality_perturbation", "convex_hull", "simplex_rows", "positive_weights",
        "lower_triangular", "short_sequence", *REF),      # NaN from the second call on
}

SDPA_HIDDEN = 'getattr(F, "scaled_dot_" + "product_attention")'           # no name a text scan could see
SDPA_CALL = f"out = {SDPA_HIDDEN}(q, k, v, is_causal=self.causal)"

MHA_HIDDEN = 'getattr(F, "multi_head_" + "attention_forward")'
MHA_IDENTITY = ["E = q.shape[-1]",                  # weights and output of F.multi_head_attention_forward
                "eye = torch.eye(E)",               # with identity projections on the head's own q, k, v
                "out, A = F.multi_head_attention_forward(",
                "    q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), E, 1, None, None, None, None, False, 0.0,",
                "    eye, None, training=False, attn_mask=(self.tril[:T, :T] == 0) if self.causal else None,",
                "    use_separate_proj_weight=True, q_proj_weight=eye, k_proj_weight=eye, v_proj_weight=eye)",
                "out = out.transpose(0, 1)"]


FUSED = "banned_fused_call"
# The mistake banned_fused_call, written to slip past a scan of the source: the child's operator watch
# (attnkit/isolation/op_watch.py) sees what ran. Each loses the interface point only.
VARIANTS = {
    "aten_math_op": _v("the aten math kernel of sdpa, called through torch.ops", FUSED, [(
        RETURN, "return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, is_causal=self.causal)[0] ")],
        "interface"),
    "getattr_concat": _v("F.scaled_dot_product_attention fetched by a concatenated string", FUSED, [(
        RETURN, f"return {SDPA_HIDDEN}(q, k, v, is_causal=self.causal) ")], "interface"),
    "multi_head_attention_forward": _v("F.multi_head_attention_forward with identity projections (with its "
                                       "weights: no fused kernel at the dispatcher)", FUSED,
                                       [(SOFTMAX, _lines(MHA_IDENTITY)), (RETURN, "return out ")], "interface"),
    "pop_modes_around_sdpa": _v("torch-function modes popped around a hidden sdpa: the dispatcher still sees it",
                                FUSED, [(RETURN, _lines([_modes_popped([SDPA_CALL]), "return out "]))], "interface"),
    "pop_modes_around_mha": _v("torch-function modes popped around a hidden F.multi_head_attention_forward",
                               FUSED, [(SOFTMAX, _modes_popped([ln.replace("F.multi_head_attention_forward", MHA_HIDDEN)
                                                                for ln in MHA_IDENTITY])), (RETURN, "return out ")],
                               "interface"),
    "stop_profiler_and_pop_modes": _v("torch's profiler stopped and the modes popped around a hidden sdpa (what "
                                      "blinded the watch when it was a recording)", FUSED, [(
                                          RETURN, _lines([STOP_PROFILER, _modes_popped([SDPA_CALL]), "return out "]))],
                                      "interface"),
    "traced_at_load": _v("sdpa traced into a graph of plain operators when the class is defined (outside every "
                         "experiment), the graph replayed in forward: the definitions' load is watched too", FUSED, [
        ("class Head(nn.Module):", _lines(["from torch.fx.experimental.proxy_tensor import make_fx",
                                           "from torch._decomp import core_aten_decompositions",
                                           "class Head(nn.Module):"], indent=0)),
        ("    def __init__(self, d, d_head, T_max, causal=True):", "    " + _lines([
            "_attn = make_fx(lambda q, k, v, keep: " + SDPA_HIDDEN + "(q, k, v, attn_mask=keep),",
            "                decomposition_table=core_aten_decompositions(), tracing_mode='symbolic')(",
            "    torch.randn(3, 7, 5), torch.randn(3, 7, 5), torch.randn(3, 7, 11), torch.ones(7, 7, dtype=torch.bool))",
            "", "def __init__(self, d, d_head, T_max, causal=True):"], indent=4)),
        (SCORES, "keep = self.tril[:T, :T].bool() if self.causal else torch.ones(T, T, dtype=torch.bool)"),
        (MASK, "pass"), (SOFTMAX, "A = Head._attn(q, k, torch.eye(T).expand(B, T, T), keep)"),
        (RETURN, "return Head._attn(q, k, v, keep) ")], "interface"),
    "unregister_stand_ins": _v("the grader's stand-ins for torch's attention kernels unregistered before a hidden "
                               "sdpa: nothing fused is seen, only that they were taken away", None, [(
                                   RETURN, _lines([UNREGISTER_STAND_INS, SDPA_CALL, "return out "]))], "interface"),
    "restart_profiler": _v("the profiler stopped and one of its own started before a hidden sdpa", FUSED, [(
        RETURN, _lines([STOP_PROFILER, RESTART_PROFILER,
                        f"return {SDPA_HIDDEN}(q, k, v, is_causal=self.causal) "]))], "interface"),
    # Other spellings of catalogued mistakes.
    "nn_dropout_module": _v("an nn.Dropout module on the weights (a fresh module trains by default)", "dropout_on_weights",
                            [("self.causal = causal", "self.causal = causal\n        self.drop = nn.Dropout(0.5)"),
                             ("self.A = A.detach()", "A = self.drop(A); self.A = A.detach()")],
                            "simplex_rows", "causality_perturbation", "convex_hull", "short_sequence", "equivariance",
                            "noncausal_unmasked", "positive_weights", *REF),
    "length_from_feature_axis": _v("T read from the feature axis: right only when d >= T_max", "mask_not_sliced",
                                   [("B, T, d = x.shape", "B, d, T = x.shape")], "short_sequence"),
    # Issue 22: mistakes students write that no catalogue entry names yet (the judge may only say "no known
    # pattern"); each loses the checks that measure its slip, and only those.
    "pruned_weights": _v("allowed weights below 2e-3 zeroed after the softmax, rows not renormalised", None, [(
        SOFTMAX, SOFTMAX + "\n        A = A * (A >= 2e-3)")], "simplex_rows", "positive_weights", "convex_hull", *REF),
    "numpy_A": _v("self.A stored as a NumPy array", None, [("self.A = A.detach()", "self.A = A.detach().numpy()")],
                  "interface"),
    "trainable_scale": _v("the 1/sqrt(d_head) scale a trainable parameter", None, [
        ("self.causal = causal", "self.causal = causal\n        self.scale = nn.Parameter(torch.tensor(d_head ** -0.5))"),
        (SCORES, "scores = q @ k.transpose(-2, -1) * self.scale")], "interface"),
    "cpu_mask_in_forward": _v("the mask built on the CPU inside forward (wrong on any GPU)", "tensor_made_on_cpu_in_forward", [(
        MASK, "scores = scores.masked_fill(torch.tril(torch.ones(T, T)) == 0, float('-inf'))")], "mask_buffer"),
    "noncausal_softmax_wrong_axis": _v("with causal=False, the softmax over the query axis", None, [(
        SOFTMAX, "A = F.softmax(scores, dim=-1 if self.causal else -2)")], "simplex_rows", *REF),
    "softmax_overflow_inf_mask": _v("exp() without subtracting the max, the future masked with -inf first",
                                    "softmax_overflow", [(SOFTMAX, "e = scores.exp()\n        A = e / e.sum(-1, keepdim=True)")],
                                    "simplex_rows"),
    # Issue 32: a head whose stored weights alone are unscaled computes right; it must not be told its scores are
    # never scaled (the name says how the head computes), only what was measured.
    "stored_unscaled": _v("self.A stores the softmax of the unscaled scores; forward computes with the right ones", None, [
        ("self.A = A.detach()", "self.A = F.softmax((q @ k.transpose(-2, -1)).masked_fill(self.tril[:T, :T] == 0, "
                                "float('-inf')) if self.causal else q @ k.transpose(-2, -1), dim=-1).detach()")],
        "scaling", *REF),
}

ALTERNATIVES = {
    "einsum": '''
import math
class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.key, self.query, self.value = (nn.Linear(d, d_head, bias=False) for _ in range(3))
        self.causal = causal
        self.register_buffer("tril", torch.tril(torch.ones(T_max, T_max)))

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.query(x), self.key(x), self.value(x)
        s = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1])
        if self.causal:
            s = s.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        A = s.softmax(-1)
        self.A = A.detach()
        return torch.einsum("bts,bsd->btd", A, v)
''',
    "additive_finite_mask": '''
class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.key = nn.Linear(d, d_head, bias=False)
        self.query = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.register_buffer("tril", torch.tril(torch.ones(T_max, T_max)))

    def forward(self, x):
        T = x.shape[1]
        s = self.query(x) @ self.key(x).mT * self.key.out_features ** -0.5
        if self.causal:
            s = s + (1.0 - self.tril[:T, :T]) * -1e9
        A = torch.softmax(s, dim=-1)
        self.A = A.detach()
        return A @ self.value(x)
''',
    "bool_buffer_where": '''
NEG = float("-inf")
class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.query = nn.Linear(d, d_head, bias=False)
        self.key = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.register_buffer("tril", torch.ones(T_max, T_max, dtype=torch.bool).tril())

    def forward(self, x):
        B, T, _ = x.shape
        q, k = self.query(x), self.key(x)
        s = q.matmul(k.transpose(1, 2)).div(q.size(-1) ** 0.5)
        if self.causal:
            s = torch.where(self.tril[:T, :T], s, torch.full_like(s, NEG))
        A = F.softmax(s, dim=2)
        self.A = A.detach()
        return A.bmm(self.value(x))
''',
    "handwritten_stable_softmax": '''
def stable_softmax(s):
    s = s - s.max(dim=-1, keepdim=True).values
    e = s.exp()
    return e / e.sum(dim=-1, keepdim=True)

class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.key = nn.Linear(d, d_head, bias=False)
        self.query = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.register_buffer("tril", torch.tril(torch.ones(T_max, T_max)))

    def forward(self, x):
        T = x.shape[1]
        s = self.query(x) @ self.key(x).transpose(-2, -1) / self.key.weight.shape[0] ** 0.5
        if self.causal:
            s = s.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        A = stable_softmax(s)
        self.A = A.detach()
        return A @ self.value(x)
''',
    "precomputed_scale": '''
import math
class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.key = nn.Linear(d, d_head, bias=False)
        self.query = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.scale = 1.0 / math.sqrt(d_head)
        self.register_buffer("tril", torch.tril(torch.ones(T_max, T_max)))

    def forward(self, x):
        B, T, C = x.shape
        q = self.query(x) * self.scale
        s = q @ self.key(x).transpose(-2, -1)
        if self.causal:
            s = s.masked_fill(self.tril[:T, :T] == 0, -float("inf"))
        self.A = F.softmax(s, dim=-1).detach()
        return F.softmax(s, dim=-1) @ self.value(x)
''',
    "finfo_min_fill_nonpersistent_buffer": '''
class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.key = nn.Linear(d, d_head, bias=False)
        self.query = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.register_buffer("tril", torch.triu(torch.ones(T_max, T_max), 1) == 0, persistent=False)

    def forward(self, x):
        T = x.size(1)
        s = torch.bmm(self.query(x), self.key(x).transpose(1, 2)) / (self.key.out_features ** 0.5)
        if self.causal:
            s = s.masked_fill(~self.tril[:T, :T], torch.finfo(s.dtype).min)
        A = F.softmax(s, dim=-1)
        self.A = A.clone().detach()
        return torch.bmm(A, self.value(x))
''',
    "float64_inside_functional_linear": '''
import math
class Head(nn.Module):
    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.key = nn.Linear(d, d_head, bias=False)
        self.query = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.register_buffer("tril", torch.tril(torch.ones(T_max, T_max)))

    def forward(self, x):
        T = x.shape[-2]
        xd = x.double()
        q = F.linear(xd, self.query.weight.double())
        k = F.linear(xd, self.key.weight.double())
        v = F.linear(xd, self.value.weight.double())
        s = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        if self.causal:
            s = s.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        A = s.softmax(dim=-1)
        self.A = A.detach().float()
        return (A @ v).float()
''',
}


SOLUTION_CELL = contract_cell(__file__)      # the manifest's [contract]
PREAMBLE = "import torch, torch.nn as nn, torch.nn.functional as F\n"


def alternative(name: str) -> str:
    return PREAMBLE + ALTERNATIVES[name]


def mutate(solution_src: str, name: str) -> str:
    return apply_edits(solution_src, name, MUTANTS[name])
