"""The hidden checks for `Head`. Each is a pytest test over the judge's own data.

Run as a pytest suite (``pytest autograder/causal_head --submission NB.ipynb``)
or called one by one by ``autograder.judge``. Every verdict is computed here,
in the judge's process, from arrays the student's process returned for inputs
and weights the judge generated; nothing the submission defined is called.
Tolerances: float32 attention on tiny shapes agrees with the float64 reference
to ~1e-7, so 1e-5 leaves room for any correct summation order (einsum, a
hand-written stable softmax, an additive finite mask) while no real mistake
fits inside it. Bitwise comparisons only where the lecture says bitwise.
"""
import torch

from .. import reference
from ..measure import require_scale
from ..results import require
from .evidence import fused_in_source, watched_ops
from .plan import B, D_HEAD, GRAD_TARGET, PERTURBED, T_MAX, T_SHORT

ATOL, RTOL = 1e-5, 1e-4
FUTURE_TOL = 1e-12     # exp(-1e9) and exp(-inf) are both exactly 0 in float32


def _w(plan, prefix):
    t = plan["tensors"]
    return t[f"{prefix}_query"], t[f"{prefix}_key"], t[f"{prefix}_value"]


def _future(T):
    return ~reference.causal_mask(T)                                       # (T, T) True above the diagonal


def _shape(run, key, shape, what):
    got = tuple(run[key].shape)
    require(got == tuple(shape), f"{what} has shape {got}, expected {tuple(shape)}")
    return run[key]


def _causal_A(results):
    run = results.get("causal")
    return _shape(run, "A0", (B, T_MAX, T_MAX), "self.A"), run


def test_simplex_rows(results, plan):
    """Prop 3.1: every row of A is a probability distribution."""
    A, _ = _causal_A(results)
    require(torch.isfinite(A).all(), "self.A contains NaN or inf: a row has no allowed position "
                                     "(is the diagonal masked out?)")
    require((A >= 0).all(), f"self.A has negative weights (min {A.min():.3g}); softmax weights are never negative")
    err = (A.sum(-1) - 1).abs().max().item()
    require(err <= ATOL, f"rows of self.A do not sum to 1 (largest error {err:.3g}); "
                         "masking must happen before the softmax so each row is renormalised")


def test_convex_hull(results, plan):
    """Cor 3.2: each output lies in the convex hull of the value vectors."""
    run = results.get("causal")
    out = _shape(run, "out0", (B, T_MAX, D_HEAD), "forward's output")
    wq, wk, wv = _w(plan, "w")
    v = plan["tensors"]["x"].double() @ wv.double().T                       # (B, T, d_head)
    lo, hi = v.min(dim=1).values[:, None, :], v.max(dim=1).values[:, None, :]
    ok = (out >= lo - ATOL) & (out <= hi + ATOL)
    require(torch.isfinite(out).all(), "forward's output contains NaN or inf")
    require(ok.all(), "an output lies outside the convex hull of the value vectors: its weights do not "
                      "form a convex combination (do they sum to 1? are they computed from value(x)?)")


def test_positive_weights(results, plan):
    """Cor 3.3: every allowed weight (j <= i) is strictly positive."""
    A, _ = _causal_A(results)
    allowed = reference.causal_mask(T_MAX).expand(B, -1, -1)
    require(torch.isfinite(A).all(), "self.A contains NaN or inf")
    low = A[allowed].min().item()
    require(low > 0, f"an allowed weight (on a position j <= i) is {low:.3g}; softmax of finite scores is "
                     "strictly positive, so the mask must only touch the future (j > i)")


def test_lower_triangular(results, plan):
    """Prop 5.1: the causal mask puts no weight on the future."""
    A, _ = _causal_A(results)
    leak = A[:, _future(T_MAX)].abs().max().item()
    require(leak <= FUTURE_TOL, f"self.A gives weight {leak:.3g} to future positions (j > i); the causal head "
                                "must put exactly zero weight above the diagonal")


def test_causality_perturbation(results, plan):
    """Prop 5.1 by perturbation: changing token p leaves outputs before p bitwise identical."""
    run = results.get("causal")
    out = _shape(run, "out0", (B, T_MAX, D_HEAD), "forward's output")
    out2 = _shape(run, "out1", (B, T_MAX, D_HEAD), "forward's output")
    p = PERTURBED
    require(torch.equal(out[:, :p], out2[:, :p]),
            f"changing the input at position {p} changed the outputs at positions 0..{p - 1} "
            f"(max change {(out[:, :p] - out2[:, :p]).abs().max():.3g}); an earlier output must not see later tokens")
    require(not torch.allclose(out[:, p:], out2[:, p:]),
            f"changing the input at position {p} did not change the outputs from position {p} on; "
            "the head must read its own and earlier tokens")


def test_causality_gradient(results, plan):
    """Prop 5.1 by gradient: d out_t / d x_j = 0 for j > t, and non-zero for j <= t."""
    run = results.get("grad")
    b, t = GRAD_TARGET
    g = _shape(run, "grad_x", (B, T_MAX, plan["tensors"]["x"].shape[-1]), "the gradient with respect to x")[b]
    require((g[t + 1:] == 0).all(), f"the output at position {t} has a non-zero gradient with respect to "
                                    "later positions: information flows from the future")
    require((g[:t + 1].abs().sum(-1) > 0).all(), f"the output at position {t} has zero gradient with respect "
                                                 "to some earlier position: it should depend on all of 0..t")


def test_equivariance(results, plan):
    """Thm 6.1 / Cor 6.2: an unmasked head is permutation-equivariant; position rows break it."""
    run = results.get("noncausal")
    perm = plan["tensors"]["perm"]
    outs = [_shape(run, f"out{i}", (B, T_MAX, D_HEAD), "forward's output") for i in range(8)]
    x, x_p, xp, xp_p, tok, tok_p, tp, tp_p = outs
    require(torch.allclose(x_p, x[:, perm], atol=ATOL, rtol=RTOL),
            "with causal=False, permuting the rows of X did not permute the output (Thm 6.1 fails)")
    require(torch.allclose(xp_p, xp[:, perm], atol=ATOL, rtol=RTOL),
            "with causal=False and position rows inside X, permuting the rows of X did not permute the output")
    require(torch.allclose(tok_p, tok[:, perm], atol=ATOL, rtol=RTOL),
            "with causal=False and no position rows, permuting the tokens did not permute the output")
    require(not torch.allclose(tp_p, tp[:, perm], atol=1e-3),
            "with position rows added to the tokens, permuting the tokens still permuted the output exactly: "
            "the head does not look at the content of the scores (Cor 6.2 should break this symmetry)")


def test_interface(results, plan):
    """The contract: nn.Linear(d, d_head, bias=False) projections, a `causal` flag, shapes, dtype, detached A,
    and attention built by hand: no fused attention ran (the child's operator watch) or is named (the source)."""
    meta = results.get("inspect").meta
    for name, m in meta.get("linears", {}).items():
        require(m.get("is_linear"), f"self.{name} is a {m.get('type')}, expected nn.Linear")
        require(not m.get("bias"), f"self.{name} has a bias; the projections are nn.Linear(d, d_head, bias=False)")
    require(meta.get("causal") is True, f"self.causal is {meta.get('causal')}, expected True for Head(..., causal=True)")
    g = results.get("grad").meta
    require(g.get("out_shape") == [B, T_MAX, D_HEAD], f"forward returned shape {g.get('out_shape')}, "
                                                      f"expected (B, T, d_head) = {(B, T_MAX, D_HEAD)}")
    require(g.get("out_dtype") == "float32", f"forward returned {g.get('out_dtype')}, expected float32")
    require(g.get("A_shape") == [B, T_MAX, T_MAX], f"self.A has shape {g.get('A_shape')}, expected (B, T, T)")
    require(not g.get("A_requires_grad"), "self.A still requires grad; store A.detach() so plotting it "
                                          "does not keep the graph alive")
    ran, tampered = watched_ops(results)
    require(not ran, f"your forward ran torch's fused attention ({', '.join(ran)}): this assignment builds "
                     "the scores, mask and softmax by hand")
    require(not tampered, "your code switched off the grader's operator recording (torch's profiler or its "
                          "torch-function modes) while it ran: forward must run without profiling itself or "
                          "disabling torch functions")
    named = fused_in_source(results)
    require(not named, f"the head uses {', '.join(named)}: this assignment builds the scores, mask and "
                       "softmax by hand")


def test_noncausal_unmasked(results, plan):
    """With causal=False no position is masked."""
    A = _shape(results.get("noncausal"), "A0", (B, T_MAX, T_MAX), "self.A")
    require(torch.isfinite(A).all(), "with causal=False, self.A contains NaN or inf")
    require((A[:, _future(T_MAX)] > 0).all(), "with causal=False the head still masks the future; "
                                              "the `causal` flag must switch the mask off")


def test_gradient_flow(results, plan):
    """Gradient reaches the query and key weights (the scores are part of the graph)."""
    run = results.get("grad")
    for name in ("query", "key", "value"):
        g = run.arrays.get(f"grad_{name}")
        require(g is not None and torch.isfinite(g).all() and g.abs().max() > 0,
                f"no gradient reaches self.{name}.weight: is something detached inside forward?")


def test_scaling(results, plan):
    """Scores are divided by sqrt(d_head): log-weight ratios follow S / sqrt(d_head)."""
    A = _shape(results.get("scaling"), "A0", (B, T_MAX, T_MAX), "self.A")
    wq, wk, _ = _w(plan, "s")
    x = plan["tensors"]["x_scale"].double()
    S = (x @ wq.double().T) @ (x @ wk.double().T).transpose(-2, -1)             # (B, T, T) unscaled
    require_scale(A, S, reference.causal_mask(T_MAX).expand(B, -1, -1), D_HEAD)


def test_short_sequence(results, plan):
    """T < T_max works: the mask is sliced to the input length."""
    short = results.get("short", hint=f"with T={T_SHORT} < T_max={T_MAX}, slice the mask to the current length, tril[:T, :T]")
    out = _shape(short, "out0", (B, T_SHORT, D_HEAD), f"forward's output for T={T_SHORT} < T_max={T_MAX}")
    full = _shape(results.get("causal"), "out0", (B, T_MAX, D_HEAD), "forward's output")[:, :T_SHORT]          # the same head on the full-length input
    require(torch.allclose(out, full, atol=ATOL, rtol=RTOL),
            f"with T={T_SHORT} < T_max={T_MAX} the output differs from the first {T_SHORT} outputs of the same "
            f"head on the full sequence (max difference {(out - full).abs().max():.3g}); slice the mask to the "
            "current length, tril[:T, :T]")


def test_mask_buffer(results, plan):
    """The causal mask is a registered buffer `tril` of shape (T_max, T_max), not a parameter."""
    run = results.get("inspect")
    meta = run.meta
    require("tril" in meta.get("buffers", {}), "no buffer named `tril`: register the causal mask with "
                                               "self.register_buffer('tril', ...)")
    require(not any(n.endswith("tril") for n in meta.get("parameters", {})), "`tril` is a trainable parameter; "
                                                                             "the mask must not be trained")
    tril = _shape(run, "tril", (T_MAX, T_MAX), "the `tril` buffer")
    require(torch.equal(tril != 0, reference.causal_mask(T_MAX)),
            "the `tril` buffer is not the lower-triangular mask (ones on and below the diagonal)")


def test_reference_agreement(results, plan):
    """Given the same weights, output and A agree with a correct head (causal and not)."""
    x = plan["tensors"]["x"]
    for name, causal in (("causal", True), ("noncausal", False)):
        run = results.get(name)
        out, A = run["out0"], run["A0"]
        ref_out, ref_A = reference.head_forward(x, *_w(plan, "w"), causal=causal)
        require(out.shape == ref_out.shape and A.shape == ref_A.shape,
                f"{name} head: shapes {tuple(out.shape)} / {tuple(A.shape)} differ from "
                f"{tuple(ref_out.shape)} / {tuple(ref_A.shape)}")
        err = max((out - ref_out).abs().max().item(), (A - ref_A).abs().max().item())
        require(torch.allclose(out, ref_out, atol=ATOL, rtol=RTOL) and torch.allclose(A, ref_A, atol=ATOL, rtol=RTOL),
                f"with causal={causal}, given the same weights, the output or self.A differs from a correct "
                f"head by up to {err:.3g}")
    run = results.get("causal")
    require(torch.equal(run["out2"], run["out0"]), "two calls on the same input gave different outputs: "
                                                   "the head must be deterministic (no dropout, no randomness)")
