"""The hidden checks for `Head`. Each is a pytest test over the judge's own data.

Run as a pytest suite (``python -m pytest -p attnkit.pytest_suite autograder/causal_head --submission NB.ipynb``)
or called one by one by ``attnkit.engine.judge``. Every verdict is computed here,
in the judge's process, from arrays the student's process returned for inputs
and weights the judge generated; nothing the submission defined is called.
Tolerances: float32 attention on tiny shapes agrees with the float64 reference
to ~1e-7, so 1e-5 leaves room for any correct summation order (einsum, a
hand-written stable softmax, an additive finite mask) while no real mistake
fits inside it. Bitwise comparisons only where the lecture says bitwise.
"""
import torch

from . import reference
from attnkit.toolkit.measure import require_scale, softmax_temperature
from attnkit.toolkit.require import CheckFailed, require
from attnkit.toolkit.evidence import require_own_attention
from .plan import B, D_HEAD, D_HEAD2, GRAD_TARGET, HUGE_SCORE, LENGTHS, PERTURBED, STATE_CALLS, STATE_T, T_MAX, T_MAX2, TINY

ATOL, RTOL = 1e-5, 1e-4
FUTURE_TOL = 1e-12     # exp(-1e9) and exp(-inf) are both exactly 0 in float32
GRAD_FLOOR = 1e-6      # a dependence this weak is rounding, not reading (the visible cell's threshold too)
LEAK_ROUNDING = 1e-6   # a future gradient below this share of the past's is float rounding of a cancelled term


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


# The causal run's inputs the weight checks read (plan.py): index -> how the message names it.
STRESS = {0: "", 4: " (on an input whose scores are nearly tied)", 5: " (on an input built with tiny allowed weights, "
          f"down to 1e-6)", 6: " (on an input with large scores, up to 30)"}
TINY_INPUT = 5
HUGE_INPUT = 8         # the causal run's input whose every score is plan.HUGE_SCORE
HUGE_TOL = 1e-3        # float32 holds a score of 300 to ~3e-5, so a correct stable softmax written another way
                       # (exp(s - logsumexp(s))) sums to 1 within ~1e-4 there: this input tests the overflow only


def _stressed(results):
    """(A, where) of the causal run on the judge's input and on each input built to stress the weights."""
    run = results.get("causal")
    return [(_shape(run, f"A{i}", (B, T_MAX, T_MAX), "self.A"), where) for i, where in STRESS.items()]


def _differ(a, b) -> bool:
    return a.shape != b.shape or not torch.equal(a.nan_to_num(), b.nan_to_num())


def repeat_cause(results) -> str | None:
    """Why two calls of one head on the same input disagree, as measured, or None when they agree. Measured
    before any check reads a difference as the future's: the causal run's first and third calls (the same input),
    the buffers and parameters before and after its first call, and one instance's calls in train and eval
    mode (the `state` run)."""
    run = results.results.get("causal")
    if not run or run[0].get("error") or not {"out0", "out2"} <= set(run[1]):
        return None
    if not _differ(run[1]["out0"], run[1]["out2"]):
        return None
    changed = (run[0].get("meta") or {}).get("changed_by_first_call") or []
    if changed:
        return (f"forward changed {', '.join(f'`{n}`' for n in changed[:3])} during its first call, so the next "
                "call on the same input computed something else: forward must leave the head's buffers and "
                "parameters as it found them")
    st = results.results.get("state")
    calls = st[1] if st and not st[0].get("error") else {}
    if {"out2", "out3", "out4", "out5"} <= set(calls) and _differ(calls["out2"], calls["out3"]) \
            and not _differ(calls["out4"], calls["out5"]):
        return ("two calls on the same input gave different outputs in train mode (a new module's mode) and the "
                "same in eval mode: randomness that training switches on (dropout) runs in forward; this head has "
                "none")
    return ("two calls on the same input gave different outputs: something random (dropout, a random draw) runs "
            "in forward; the head must be deterministic")


def _state_runs(results):
    """The `state` run's (meta, arrays), or an empty pair when it did not run."""
    entry = results.results.get("state")
    return ((entry[0].get("meta") or {}), entry[1]) if entry and not entry[0].get("error") else ({}, {})


def _lengths(ts) -> str:
    """T = 1, 2, 3 as a student reads it."""
    return ", ".join(str(t) for t in ts)


def _row_sum_cause(A) -> str:
    """Why the rows of A do not sum to 1, as far as the numbers show; nothing when they do not tell."""
    ones = lambda s: bool(((s - 1).abs() <= ATOL).all())  # noqa: E731
    if ones(A.sum(-2)):
        return ("; its columns sum to 1 instead: the softmax ran over the query axis, and each row (one query) "
                "must be a distribution over the keys, dim=-1")
    if ones(A.sum(0)):
        return ("; it sums to 1 over the batch instead: the softmax ran over dim 0 (F.softmax without dim= picks "
                "dim 0 for a 3-D tensor), and each row must be a distribution over the keys, dim=-1")
    future = A[:, _future(A.shape[-1])]
    if (A.sum(-1) <= 1 + ATOL).all() and (future == 0).all() and (A.sum(-1) < 1 - ATOL).any():
        return ("; the future weights are exactly 0 and the rows sum to less than 1: the future was removed "
                "after the softmax, so mask the scores with -inf before it and let it renormalise each row")
    return ""


def _nonfinite_sentence(A) -> str:
    """What is not finite in A, and where: NaN on the allowed positions, NaN only on the masked ones, infinities."""
    future = _future(A.shape[-1]).expand_as(A)
    rows = sorted({int(i) for i in (~torch.isfinite(A)).any(-1).nonzero()[:, 1]})
    if torch.isinf(A).any() and not torch.isnan(A).any():
        return (f"self.A has infinite entries (in rows {_lengths(rows)}); softmax weights lie between 0 and 1, so "
                "self.A should hold the softmax's result")
    if not torch.isnan(A[~future]).any():
        return (f"self.A is NaN on masked (future) positions only, in rows {_lengths(rows)}: a softmax over the "
                "keys of one row gives those exactly 0, so the normalisation did not run over each row (dim=-1)")
    if torch.isnan(A[:, 0, 0]).any():
        every = bool(torch.isnan(A[~future]).all())      # blind set 13's m19: (1 - tril) * -inf, NaN where 0 * -inf
        return ("self.A has NaN in row 0, which may only read position 0: the score there is -inf or NaN (the "
                "diagonal masked too, or a mask made as 0 * -inf, which is NaN), so the row has nothing to normalise"
                + ("; every allowed weight of every row is NaN" if every else ""))
    return f"self.A contains NaN or inf (rows {_lengths(rows)})"


def _require_simplex(A, where, tol=ATOL):
    require(torch.isfinite(A).all(), _nonfinite_sentence(A) + where)
    require((A >= 0).all(), f"self.A has negative weights (min {A.min():.3g}){where}; softmax weights are never "
                            "negative")
    err = (A.sum(-1) - 1).abs().max().item()
    require(err <= tol, f"rows of self.A do not sum to 1 (largest error {err:.3g}){where}" + _row_sum_cause(A))


def test_simplex_rows(results, plan):
    """Prop 3.1: every row of A is a probability distribution: on the judge's input, on inputs built with tiny
    allowed weights, near-tied, large and huge scores (where a softmax that does not subtract the max overflows),
    and with causal=False (where nothing is masked)."""
    for A, where in _stressed(results):
        _require_simplex(A, where)
    huge = _shape(results.get("causal"), f"A{HUGE_INPUT}", (B, T_MAX, T_MAX), "self.A")
    rows = sorted({int(i) for i in (~torch.isfinite(huge)).any(-1).nonzero()[:, 1]})
    require(torch.isfinite(huge).all(), f"on an input whose scores are all {HUGE_SCORE:g}, self.A has NaN or inf (rows "
                                        f"{_lengths(rows)}): exp() of a score above 88.7 overflows float32, so a "
                                        "softmax must subtract each row's largest score first (F.softmax does)")
    _require_simplex(huge, f" (on an input whose scores are all {HUGE_SCORE:g})", HUGE_TOL)
    A = _shape(results.get("noncausal"), "A0", (B, T_MAX, T_MAX), "self.A with causal=False")
    require(torch.isfinite(A).all(), "with causal=False, self.A contains NaN or inf")
    err = (A.sum(-1) - 1).abs().max().item()
    # weights set to 0 with causal=False are the business of noncausal_unmasked; here, rows with nothing masked
    require(err <= ATOL or (A == 0).any(), f"with causal=False, rows of self.A do not sum to 1 (largest error "
                                           f"{err:.3g}) although nothing is masked" + _row_sum_cause(A))


def test_convex_hull(results, plan):
    """Cor 3.2: each output lies in the convex hull of the value vectors: on the judge's input, and on tokens
    close to one common row, whose values fill a small box far from 0 (an output that is not a convex combination
    of them leaves it for every draw)."""
    run = results.get("causal")
    wq, wk, wv = _w(plan, "w")
    for i, name, where in ((0, "x", ""), (4, "x_hull", " (on tokens close to one common row, whose values lie close "
                                                         "together)"),
                           (5, "x_tiny", " (on tokens that all have the same value vector, so a correct output is "
                                         "that vector)")):
        out = _shape(run, f"out{i}", (B, T_MAX, D_HEAD), "forward's output")
        v = plan["tensors"][name].double() @ wv.double().T                  # (B, T, d_head)
        lo, hi = v.min(dim=1).values[:, None, :], v.max(dim=1).values[:, None, :]
        ok = (out >= lo - ATOL) & (out <= hi + ATOL)
        require(torch.isfinite(out).all(), "forward's output contains NaN or inf")
        A = run.arrays.get(f"A{i}")
        convex = A is not None and A.shape == (B, T_MAX, T_MAX) and bool((A >= -ATOL).all()) and \
            bool(((A.sum(-1) - 1).abs() <= ATOL).all())
        require(ok.all(), f"an output lies outside the convex hull of the value vectors{where} " + (
            "although self.A is a convex combination (rows >= 0 summing to 1): the output is not self.A times "
            "value(x)" if convex else "and the rows of self.A are not convex combinations (non-negative, summing "
            "to 1)"))


def test_positive_weights(results, plan):
    """Cor 3.3: every allowed weight (j <= i) is strictly positive, tiny ones included (an input is built with
    allowed weights down to 1e-6, far above float32's underflow)."""
    allowed = reference.causal_mask(T_MAX).expand(B, -1, -1)
    for (A, where), i in zip(_stressed(results), STRESS):
        require(torch.isfinite(A[allowed]).all(), f"self.A has NaN or inf on an allowed position (j <= i){where}")
        if i:
            A = _zeros_that_mask(A, plan, STRESS_INPUTS[i])
        low = A[allowed].min().item()
        require(low > 0, f"an allowed weight (on a position j <= i) is {low:.3g}{where}; softmax of finite scores is "
                         "strictly positive, so nothing but the future (j > i) may be set to 0")


STRESS_INPUTS = {4: "x_hull", 5: "x_tiny", 6: "x_large"}


def _zeros_that_mask(A, plan, name):
    """A with 1 in every row whose zeros are not a mask: a row whose non-zero allowed weights are not (up to one
    factor, for a row renormalised after pruning) a correct head's has its own scores, which may underflow to
    an exact 0 in float32 on an input built for the correct ones; that is the business of the checks that see
    wrong scores, not of this one."""
    _, ref = reference.head_forward(plan["tensors"][name], *_w(plan, "w"), causal=True)
    ref = ref.masked_fill(~reference.causal_mask(T_MAX), 1.0)   # the future is not this check's
    keep = (A > 0) & reference.causal_mask(T_MAX)
    ratio = torch.where(keep, A / ref, torch.nan)
    lo, hi = ratio.nan_to_num(float("inf")).min(-1).values, ratio.nan_to_num(0.0).max(-1).values
    own = (hi - lo).abs() > 1e-3 * lo.abs()                   # (B, T) rows that are not the correct softmax
    # or a row with a 0 where the correct weight is large (> 0.05): no pruning of small weights makes that, so its
    # scores are its own even when one weight is left and no ratio can tell (keys from W_Q lost this check on one
    # grading key in three, attnkit check)
    own |= ((A == 0) & (ref > 0.05) & reference.causal_mask(T_MAX)).any(-1)
    # nor a zero where even the correct weight is below what the inputs are built to show (TINY): a row with one
    # weight left fits "renormalised" whatever its scores, so the size of the correct weight decides there
    return torch.where(own[..., None] | (ref < TINY / 2), torch.ones_like(A), A)


def test_lower_triangular(results, plan):
    """Prop 5.1: the causal mask puts no weight on the future."""
    for A, where in _stressed(results):
        above = A[:, _future(T_MAX)]
        require(not torch.isnan(above).any(), f"self.A is NaN on future positions (j > i){where}, where the causal "
                                              "head must put exactly zero weight")
        leak = above.abs().max().item()
        require(leak <= FUTURE_TOL, f"self.A gives weight {leak:.3g} to future positions (j > i){where}; the causal "
                                    "head must put exactly zero weight above the diagonal")


def test_causality_perturbation(results, plan):
    """Prop 5.1 by perturbation: changing token p (a large change, both ways) leaves outputs before p bitwise
    identical."""
    run = results.get("causal")          # any width: the shape is the interface's business, not causality's
    out = _shape(run, "out0", (B, T_MAX, run["out0"].shape[-1]) if run["out0"].dim() == 3 else (B, T_MAX, D_HEAD),
                 "forward's output")
    p = PERTURBED
    cause = repeat_cause(results)
    require(cause is None, f"causality cannot be measured by perturbation: {cause}")
    for key in ("out1", "out3"):
        out2 = _shape(run, key, tuple(out.shape), "forward's output")
        drift = (out[:, :p] - out2[:, :p]).abs().max().item()
        require(torch.equal(out[:, :p], out2[:, :p]) or not drift <= ATOL,        # NaN is no rounding
                f"changing the input at position {p} changed the outputs at positions 0..{p - 1} in their last "
                f"bits (max change {drift:.3g}): something taken over the whole row, future included (a max or a "
                "sum before masking), feeds the computation; causality here is bitwise")
        require(torch.equal(out[:, :p], out2[:, :p]),
                f"changing the input at position {p} changed the outputs at positions 0..{p - 1} "
                f"(max change {drift:.3g}); an earlier output must not see later tokens")
        require(not torch.allclose(out[:, p:], out2[:, p:]),
                f"changing the input at position {p} did not change the outputs from position {p} on; "
                "the head must read its own and earlier tokens")


_NO_GRAPH = ("forward's output does not require grad (detached, or computed under torch.no_grad), so no gradient "
             "flows back to the input or the weights")


def test_causality_gradient(results, plan):
    """Prop 5.1 by gradient: d out_t / d x_j = 0 for j > t, and non-zero for j <= t (a large last token, both
    ways, so that no leak hides in the data)."""
    for name in ("grad", "grad_neg"):
        run = results.get(name)
        b, t = GRAD_TARGET
        require(run.meta.get("out_requires_grad", True), _NO_GRAPH)
        require("grad_x" in run.arrays, "no gradient reaches the input x, although the weights get one: forward "
                                        "cuts x from the graph (x.detach(), x.data), so no output depends on x")
        g = _shape(run, "grad_x", (B, T_MAX, plan["tensors"]["x"].shape[-1]), "the gradient with respect to x")[b]
        # zero up to float rounding of the past's own gradient: a softmax over the whole row renormalised after
        # the mask has a future gradient that is exactly 0 on some draws and 1e-8 of the past's on others (blind
        # set 7, m19: 16 or 18 points by the key); its future reaches the output only in the last bits, which
        # test_causality_perturbation sees bitwise on every draw
        leak, past = g[t + 1:].abs().max(), g[:t + 1].abs().max()
        require(leak <= LEAK_ROUNDING * past, f"the output at position {t} has a non-zero gradient with respect to "
                                              f"later positions (up to {leak:.3g}): information flows from the future")
        require((g[:t + 1].abs().sum(-1) > GRAD_FLOOR).all(), f"the output at position {t} has zero gradient (below "
                                                              f"{GRAD_FLOOR:g}, rounding) with respect to some "
                                                              "earlier position: it should depend on all of 0..t")


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
            "the head does not look at the content of the scores (position rows should break this symmetry)")


def test_interface(results, plan):
    """The contract: nn.Linear(d, d_head, bias=False) projections, a `causal` flag, shapes, dtype, detached A,
    and attention built by hand: no fused attention ran (the child's operator watch) or is named (the source)."""
    meta = results.get("inspect").meta
    for name, m in meta.get("linears", {}).items():
        require(m.get("is_linear"), f"self.{name} is a {m.get('type')}, expected nn.Linear")
        require(not m.get("bias"), f"self.{name} has a bias; the projections are nn.Linear(d, d_head, bias=False)")
    extra = [n for n in meta.get("parameters", {}) if n not in ("query.weight", "key.weight", "value.weight")
             and not n.endswith(("bias", "tril"))]           # a bias and a trained mask have sentences of their own
    require(not extra, f"the head has trainable parameters besides the three projections ({', '.join(extra[:3])}): "
                       "training would change them too; a fixed number (the scale) is a plain attribute or a buffer")
    kinds = sorted({k for n in ("causal", "noncausal", "grad") for k in
                    (results.results.get(n, ({}, {}))[0].get("meta") or {}).get("A_types", [])})
    require(not kinds, f"self.A is a NumPy {(kinds or [''])[0]}, expected a torch.Tensor: store A.detach() (the checks "
                       "read it as a tensor)")
    _one_instance_contract(results)
    require(meta.get("causal") is True, f"self.causal is {meta.get('causal')}, expected True for Head(..., causal=True)")
    built = results.get("defaults", hint="the contract is Head(d, d_head, T_max) with causal=True by default")
    require(built.meta.get("causal") is True, f"Head(d, d_head, T_max), built without causal=, has self.causal = "
                                              f"{built.meta.get('causal')}: the default must be causal=True")
    unmasked, masked = results.get("noncausal")["A0"], results.get("causal")["A0"]
    like = lambda a, b: a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=RTOL)  # noqa: E731
    require(not (like(built["A0"], unmasked) and not like(built["A0"], masked)),
            "Head(d, d_head, T_max), built without causal=, gives the weights of Head(..., causal=False): "
            "the default must be causal=True")
    g = results.get("grad").meta
    require(g.get("out_shape") == [B, T_MAX, D_HEAD], f"forward returned shape {g.get('out_shape')}, "
                                                      f"expected (B, T, d_head) = {(B, T_MAX, D_HEAD)}")
    require(g.get("out_dtype") == "float32", f"forward returned {g.get('out_dtype')}, expected float32")
    require(g.get("A_shape") == [B, T_MAX, T_MAX], f"self.A has shape {g.get('A_shape')}, expected (B, T, T)")
    require(not g.get("A_requires_grad"), "self.A still requires grad; store A.detach() so plotting it "
                                          "does not keep the graph alive")
    require_own_attention(results, "your forward", "the scores, mask and softmax", "forward")


def _one_instance_contract(results):
    """The contract on one instance as a notebook uses it (the `state` run): a batch of one, and a call after .to(),
    run and give the shapes they should (their values are reference_agreement's)."""
    meta, calls = _state_runs(results)
    full = results.get("causal")["out0"]
    for i, (what, name, mode) in enumerate(STATE_CALLS):
        if name != "x_b1" and mode != "to":
            continue
        want = full[:1] if name == "x_b1" else full
        err = (meta.get("errors") or {}).get(str(i))
        require(err is None, f"the same head, called on {what}, raised {err}")
        got = calls.get(f"out{i}")
        require(got is not None and got.shape == want.shape, f"on {what} forward returned shape "
                f"{tuple(got.shape) if got is not None else None}, expected {tuple(want.shape)}")


def test_noncausal_unmasked(results, plan):
    """With causal=False no position is masked."""
    A = _shape(results.get("noncausal"), "A0", (B, T_MAX, T_MAX), "self.A")
    require(torch.isfinite(A).all(), "with causal=False, self.A contains NaN or inf")
    # measured where every weight is near 1/T (nearly tied scores): a 0 there is a mask, never a tiny weight
    tied = _shape(results.get("noncausal"), "A8", (B, T_MAX, T_MAX), "self.A")
    future = tied[:, _future(T_MAX)]
    if (future != 0).all():                # a negative or odd weight is the rows' business; a 0 is a mask
        return
    out = results.get("noncausal")["out0"]
    ref_out, _ = reference.head_forward(plan["tensors"]["x"], *_w(plan, "w"), causal=False)
    require(not (out.shape == ref_out.shape and torch.allclose(out, ref_out, atol=ATOL, rtol=RTOL)),
            "with causal=False forward's output is the unmasked head's, but self.A has weights of exactly 0 on "
            "future positions: store the weights forward uses")
    require(not (future == 0).all(), "with causal=False the head still masks the future; the `causal` flag must "
                                     "switch the mask off")
    require(False, "with causal=False some weights on future positions are exactly 0 (on nearly tied scores, where "
                   "every weight is close to 1/T); an unmasked softmax gives every position a positive weight")


def test_gradient_flow(results, plan):
    """Gradient reaches the query, key and value weights (the scores are part of the graph)."""
    run = results.get("grad")
    require(run.meta.get("out_requires_grad", True), _NO_GRAPH)
    for name in ("query", "key", "value"):
        g = run.arrays.get(f"grad_{name}")
        require(g is not None, f"self.{name}.weight received no gradient at all: self.{name} is not on the path "
                               "from x to the output (unused, or its result detached)")
        require(torch.isfinite(g).all(), f"the gradient of self.{name}.weight contains NaN or inf")
        require(g.abs().max() > 0, f"the gradient of self.{name}.weight is exactly zero: the output does not "
                                   f"depend on self.{name}")


def test_scaling(results, plan):
    """Scores are divided by sqrt(d_head): log-weight ratios follow S / sqrt(d_head)."""
    A = _shape(results.get("scaling"), "A0", (B, T_MAX, T_MAX), "self.A")
    wq, wk, _ = _w(plan, "s")
    x = plan["tensors"]["x_scale"].double()
    S = (x @ wq.double().T) @ (x @ wk.double().T).transpose(-2, -1)             # (B, T, T) unscaled
    require_scale(A, S, reference.causal_mask(T_MAX).expand(B, -1, -1), D_HEAD)
    # d_head = 4 is the one width where d_head / 2 (`d_head ** 1/2`, as Python reads it) and a constant 2 equal
    # sqrt(d_head): both kept every point (blind set 7). The head of the second geometry, d_head = 9, is measured too
    # (when its weights are a softmax of Q K^T at all: weights of other scores are the other checks' business)
    A2 = _shape(results.get("geometry2"), "A0", (B, T_MAX2, T_MAX2), f"self.A of a head with d_head = {D_HEAD2}")
    t = plan["tensors"]
    x2 = t["x_g2"].double()
    S2 = (x2 @ t["g2_query"].double().T) @ (x2 @ t["g2_key"].double().T).transpose(-2, -1)   # (B, T2, T2) unscaled
    allowed2 = reference.causal_mask(T_MAX2).expand(B, -1, -1)
    if torch.isfinite(A2).all() and softmax_temperature(A2, S2, allowed2)[1] < 1e-3:
        require_scale(A2, S2, allowed2, D_HEAD2)
    # causal=False: the same temperature, measured whenever those weights are a softmax of the scores at all
    # (weights that are not are the business of the checks that see them: rows, the reference)
    A = _shape(results.get("scaling_noncausal"), "A0", (B, T_MAX, T_MAX), "self.A with causal=False")
    # weights that underflowed to 0 are left out of the fit (softmax_temperature), not the whole measurement: an
    # unscaled head's larger scores underflowed on some draws only, and kept the check then
    if torch.isfinite(A).all() and (A >= 0).all() and ((A > 1e-30).sum(-1) >= 2).any():
        c, resid = softmax_temperature(A, S, torch.ones(B, T_MAX, T_MAX, dtype=torch.bool))
        want = 1 / D_HEAD**0.5
        require(resid >= 1e-3 or abs(c / want - 1) < 1e-3,
                "with causal=False the scores are scaled wrongly: measured " + (
                    "no scaling at all" if abs(c - 1) < 1e-3 else f"division by {1 / c:.4g}" if c > 0 else
                    f"factor {c:.3g}") + f", expected division by sqrt(d_head) = {D_HEAD**0.5:g} (as with causal=True)")


def test_short_sequence(results, plan):
    """Every length T = 1 .. T_max - 1 works, and agrees with the same head on the full sequence.

    For a causal head the output at length T is the first T outputs at T_max, and (when the full-length
    weights put nothing on the future) self.A is the top-left T x T block of the full-length one; with the
    full-length checks this carries every property (rows, mask, causality, the reference) to every length."""
    full = _shape(results.get("causal"), "out0", (B, T_MAX, D_HEAD), "forward's output")
    full_A = _shape(results.get("causal"), "A0", (B, T_MAX, T_MAX), "self.A")
    full_causal = bool((full_A[:, _future(T_MAX)].abs() <= FUTURE_TOL).all())
    raised, shaped, differ, weights = {}, [], {}, []
    for T in LENGTHS:
        try:
            run = results.get(f"len{T}")
            out, A = run["out0"], run["A0"]
        except CheckFailed as e:
            raised[T] = str(e)
            continue
        if tuple(out.shape) != (B, T, D_HEAD) or tuple(A.shape) != (B, T, T):
            shaped.append((T, tuple(out.shape), tuple(A.shape)))
            continue
        if not torch.allclose(out, full[:, :T], atol=ATOL, rtol=RTOL, equal_nan=False):
            gap = (out - full[:, :T]).abs()
            differ[T] = gap.max().item() if torch.isfinite(gap).all() else float("nan")
        elif full_causal and not torch.allclose(A, full_A[:, :T, :T], atol=ATOL, rtol=RTOL):
            weights.append(T)
    if not raised and not shaped and not differ and not weights:
        _lengths_on_one_instance(results, full)
    if raised:
        first = next(iter(raised.values()))
        sized = all(("size" in m or "shape" in m) for m in raised.values())
        require(False, f"with T = {_lengths(raised)} < T_max = {T_MAX}, {first}" + (
            ": something in forward keeps the size T_max instead of the input's T; slice the mask to the current "
            "length, tril[:T, :T]" if sized else ""))
    require(not shaped, "; ".join(f"with T = {T} < T_max = {T_MAX} forward returned shape {o} and self.A {a}, "
                                  f"expected {(B, T, D_HEAD)} and {(B, T, T)}" for T, o, a in shaped[:2]))
    broken = [T for T, gap in differ.items() if gap != gap]
    require(not broken, f"with T = {_lengths(broken)} < T_max = {T_MAX}, forward's output or the first T outputs on "
                        "the full sequence contain NaN or inf, so they cannot agree")
    worst = max(differ, key=differ.get) if differ else None
    require(not differ, f"with T = {_lengths(differ)} < T_max = {T_MAX} the output differs from the first T outputs "
                        f"of the same head on the full sequence (largest difference {differ.get(worst, 0):.3g}, at "
                        f"T = {worst}): an output may depend only on the positions up to it, whatever follows them")
    require(not weights, f"with T = {_lengths(weights)} < T_max = {T_MAX} self.A is not the top-left T x T block of "
                         "self.A on the full sequence, although the outputs agree: store the weights forward uses")


def _lengths_on_one_instance(results, full):
    """The same instance called at several lengths (longer, shorter, longer again; T = 1), and a short first call
    followed by T_max: each call must give what a fresh head gives. A head that keeps something of its first call
    (a mask built for the first T) shows it here."""
    meta, calls = _state_runs(results)
    seq = [(i, what, name) for i, (what, name, mode) in enumerate(STATE_CALLS) if mode == "train" and name != "x_b1"]
    for i, what, name in seq:
        T = STATE_T if name == f"x_len{STATE_T}" else 1 if name == "x_len1" else T_MAX
        err = (meta.get("errors") or {}).get(str(i))
        story = f"the same head, called at T = {T_MAX} first, {what}"
        require(err is None, f"{story}, raised {err}: forward must not keep anything of an earlier call (a mask "
                             "built for the first length)")
        got = calls.get(f"out{i}")
        require(got is not None and got.shape == (B, T, D_HEAD), f"{story}, returned shape "
                f"{tuple(got.shape) if got is not None else None}, expected {(B, T, D_HEAD)}")
        if not torch.allclose(got, full[:, :T], atol=ATOL, rtol=RTOL):
            cause = repeat_cause(results)
            require(False, f"{story}, gave outputs that differ from a fresh head's (by up to "
                           f"{(got - full[:, :T]).abs().max():.3g})" + (f": {cause}" if cause else
                           ": forward keeps something of an earlier call (a mask built for the first length)"))
    for T in LENGTHS:
        run = results.get(f"len{T}")
        got = run.arrays.get("then_out0")
        story = f"the same head, called at T = {T} first, then at T = {T_MAX}"
        err = (run.meta.get("then_errors") or {}).get("0")
        require(err is None, f"{story}, raised {err}: forward must not keep anything of an earlier call (a mask "
                             "built for the first length)")
        require(got is not None and got.shape == full.shape, f"{story}, returned shape "
                f"{tuple(got.shape) if got is not None else None}, expected {tuple(full.shape)}")
        if not torch.allclose(got, full, atol=ATOL, rtol=RTOL):
            cause = repeat_cause(results)
            require(False, f"{story}, gave outputs that differ from a fresh head's (by up to "
                           f"{(got - full).abs().max():.3g})" + (f": {cause}" if cause else
                           ": forward keeps something of an earlier call (a mask built for the first length)"))


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
    # a forward that raised is the business of the checks that call it: what it changed is read only when it ran
    causal = results.results.get("causal")
    first = ((causal[0].get("meta") or {}).get("changed_by_first_call", []) if causal and not causal[0].get("error")
             else [])
    changed = [n for n in first if n in meta.get("buffers", {})]
    require(not changed, f"forward changed the buffer {', '.join(f'`{n}`' for n in changed)} in place during its "
                         "first call, so every later call sees another mask: build what forward needs from the "
                         "buffer without writing into it")
    on_meta = results.results.get("meta")            # an error there (a timeout) is no finding about the mask
    moved = ((on_meta[0].get("meta") or {}).get("device_mismatch") if on_meta and not on_meta[0].get("error")
             else None)
    require(not moved, f"moved to another device (head.to(device)), forward failed with {moved}: a tensor forward "
                       "builds on the CPU (a mask made with torch.ones or torch.tril inside forward) does not move "
                       "with the head; use the buffer, or make it on x.device")


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
    out, A = run["out5"], run["A5"]
    ref_out, ref_A = reference.head_forward(plan["tensors"]["x_tiny"], *_w(plan, "w"), causal=True)
    require(out.shape == ref_out.shape and A.shape == ref_A.shape and torch.allclose(out, ref_out, atol=ATOL, rtol=RTOL)
            and torch.allclose(A, ref_A, atol=ATOL, rtol=RTOL),
            "on an input built with tiny allowed weights (down to 1e-6), given the same weights, the output or self.A "
            "differs from a correct head" + (f" by up to {max((out - ref_out).abs().max(), (A - ref_A).abs().max()):.3g}"
                                            if out.shape == ref_out.shape and A.shape == ref_A.shape else ""))
    meta, calls = _state_runs(results)
    for i, (what, name, mode) in enumerate(STATE_CALLS):
        # the batch of one, after .to(), and in eval mode (blind set 9: a mask applied only `if self.training`
        # read the future after .eval(); the contract allows no randomness, so eval computes what train does)
        if name != "x_b1" and mode not in ("to", "eval"):
            continue
        got = calls.get(f"out{i}")
        ref_out, ref_A = reference.head_forward(plan["tensors"][name], *_w(plan, "w"), causal=True)
        if got is not None and got.shape == ref_out.shape:     # a call that failed is the interface's business
            right = torch.allclose(got, ref_out, atol=ATOL, rtol=RTOL)
            short = plan["tensors"][name].shape[1] != T_MAX     # its output at a shorter length: short_sequence's
            require(right or short or repeat_cause(results) is not None,
                    f"{'' if what.startswith(('in ', 'after ')) else 'on '}{what}, given the same weights, "
                    f"forward's output differs from a correct head by up to "
                    f"{(got - ref_out).abs().max():.3g}")
            A = calls.get(f"A{i}")
            if mode == "eval" and right and A is not None:     # self.A is this call's weights, in eval mode too
                require(A.shape == ref_A.shape and torch.allclose(A, ref_A, atol=ATOL, rtol=RTOL),
                        f"{what}, forward's output is right but self.A is not this call's attention weights ("
                        + (f"shape {tuple(A.shape)}, expected {tuple(ref_A.shape)}" if A.shape != ref_A.shape else
                           f"it differs from a correct head's by up to {(A - ref_A).abs().max():.3g}")
                        + "): store A.detach() in self.A on every call, in eval mode too")
    cause = repeat_cause(results)
    require(cause is None, cause or "")
