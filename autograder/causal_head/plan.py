"""Judge side: the inputs and experiments the hidden checks run on a student's `Head`.

Everything is generated here, in the judge's process, from fixed seeds. Shapes
are tiny so a whole class grades in seconds, and d != d_head so that scaling
by the model width instead of the head width is visible. Every experiment that
calls forward runs under the child's operator watch (op_watch.py), which
reports the fused attention it ran; ``"watch": False`` leaves one out.
"""
import torch

from attnkit.toolkit.draw import generator

D, D_HEAD, T_MAX, B = 8, 4, 6, 2
D2, D_HEAD2, T_MAX2, T_G2 = 12, 9, 9, 4    # the second geometry (the diagnosis; test_scaling): other d_head, T_max, d
GEOMETRY2 = {"d": D2, "d_head": D_HEAD2, "T_max": T_MAX2, "causal": True}
LENGTHS = tuple(range(1, T_MAX))   # every T < T_max, one experiment each, so a failure names its lengths
PERTURBED = 3          # position changed in the causality-by-perturbation run
GRAD_TARGET = (0, 3)   # (batch, position) whose output is differentiated (the visible cell's position)
VOCAB = 11


def _weights(g, prefix, same_qk=False, d=None, d_head=None):
    d, d_head = d or D, d_head or D_HEAD
    w = {f"{prefix}_{n}": torch.randn(d_head, d, generator=g) / d**0.5 for n in ("query", "key", "value")}
    if same_qk:        # symmetric scores: the scaling fit cannot be fooled by a transposed score matrix
        w[f"{prefix}_key"] = w[f"{prefix}_query"].clone()
    return w


EARLY_SCORE = 1.0      # largest |score| among the gradient run's earlier tokens: no softmax saturates there
LATE_SCORE = 30.0      # largest |score| of the late token with any other: it dominates, and exp() stays finite


def _scores_of(w):
    """M with score(x_i, x_j) = x_i^T M x_j for the judge's weights (the 1/sqrt(d_head) included), float64."""
    return w["w_query"].double().T @ w["w_key"].double() / D_HEAD**0.5


def _neutral_direction(z, M):
    """z moved along one eigenvector of M's symmetric part until its score with itself is exactly 0.

    The late token's own row then has no large entry at all: a softmax written as exp(s) / sum exp(s) (no max
    subtracted) stays finite on it, so the gradient checks see causality, not an overflow in a row they do not
    differentiate (0 * inf there made NaN gradients for some draws only)."""
    sym = (M + M.T) / 2
    lam, vec = torch.linalg.eigh(sym)
    q0 = z @ sym @ z
    k = 0 if q0 > 0 else -1                      # a negative eigenvalue undoes a positive score, and vice versa
    e, l = vec[:, k], lam[k]
    b = e @ sym @ z                               # q0 + 2 b t + l t^2 = 0 has a real root: l and q0 differ in sign
    roots = (-b + torch.tensor([1.0, -1.0], dtype=torch.float64) * (b * b - l * q0).sqrt()) / l
    return z + roots[roots.abs().argmin()] * e


def _gradient_inputs(x, w, g):
    """The gradient runs' input: x's earlier tokens scaled so that no score among them exceeds EARLY_SCORE (a
    softmax off by a temperature factor of 4 still gives every earlier position a gradient far above rounding,
    so saturation never passes for a missing dependence), and a late token, one way and the other, whose largest
    score with another token is +-LATE_SCORE and whose score with itself is 0: for one sign it dominates the rows
    it scores high in, so a gradient that leaks into the future (through a max over the whole row, say) cannot
    hide in the data."""
    M = _scores_of(w)
    late, late_neg = x.clone(), x.clone()
    z = torch.randn(x.shape[0], x.shape[-1], generator=g).double()
    for b in range(x.shape[0]):
        early = x[b, :-1].double()
        early = early / (early @ M @ early.T).abs().max().sqrt() * EARLY_SCORE**0.5
        u = _neutral_direction(z[b], M)
        cross = torch.cat([early @ M @ u, u @ M @ early.T]).abs().max()
        u = u * LATE_SCORE / cross
        late[b, :-1], late_neg[b, :-1] = early.float(), early.float()
        late[b, -1], late_neg[b, -1] = u.float(), -u.float()
    return {"x_late": late, "x_late_neg": late_neg}


def _hull_input(g):
    """Tokens close to one common row: the value vectors sit in a small box far from 0, so an output that is not a
    convex combination of them (weights summing to less or more than 1, a bias, values from another layer) leaves
    the box whatever the draw, where with spread-out values it may land inside by chance."""
    base = 2 * torch.randn(1, 1, D, generator=g)
    return base + 0.01 * torch.randn(B, T_MAX, D, generator=g)


def _derangement(g):
    """A permutation that moves every position (an identity draw would make 'permuting changed nothing' true of
    every head)."""
    while True:
        perm = torch.randperm(T_MAX, generator=g)
        if (perm != torch.arange(T_MAX)).all():
            return perm


TINY = 1e-6           # the smallest allowed weight of the tiny-weights input: far above float32's underflow
LARGE_SCORE = 30.0     # the largest |score| of the large-scores input: exp() stays finite, even unshifted
HUGE_SCORE = 300.0     # every score of the huge-scores input: exp() of it overflows float32 (> 88.7), so only a
                       # softmax that subtracts each row's max (F.softmax does) keeps finite weights
STATE_T = 3            # the shorter length of the calls on one instance (longer, shorter, longer again)
STATE_CALLS = (        # (what the call is, input, mode) on ONE instance, in this order: see drive._calls
    ("first call, T = T_max", "x", "train"), (f"then T = {STATE_T}", f"x_len{STATE_T}", "train"),
    ("then T = T_max again", "x", "train"), ("the same input again", "x", "train"),
    ("in eval mode", "x", "eval"), ("in eval mode, again", "x", "eval"),
    ("a batch of one", "x_b1", "train"), ("T = 1", "x_len1", "train"), ("after .to('cpu')", "x", "to"),
    # another input in eval mode (blind set 11: self.A stored only `if self.training` kept the last train call's
    # weights; the eval calls above, on that call's own input, hid it)
    (f"in eval mode, T = {STATE_T}", f"x_len{STATE_T}", "eval"))


def _null_space(w):
    """An orthonormal basis (columns) of the inputs w maps to 0, float64."""
    _, sv, vh = torch.linalg.svd(w.double())
    return vh[(sv > 1e-9 * sv.max()).sum():].T


def _tiny_input(w, g):
    """Tokens that all have the same value vector and whose causal weights spread from 1 down to TINY.

    Each token is one common row plus a part the value layer maps to 0, so every correct output is that one
    value: an output off it by a row's missing or extra weight (weights pruned, rows not renormalised) leaves
    the convex hull for every draw, and the weights below any pruning threshold the student may pick are
    there for every draw too (a property tested on inputs built to show it, not on the luck of the draw)."""
    M, N = _scores_of(w), _null_space(w["w_value"])
    allowed = torch.tril(torch.ones(T_MAX, T_MAX, dtype=torch.bool))
    rows = []
    for _ in range(B):
        for _attempt in range(200):
            base = torch.randn(D, generator=g).double()
            base = base / (w["w_value"].double() @ base).abs().max()          # its value: largest entry 1
            u = N @ torch.randn(N.shape[1], generator=g).double()
            steps = -torch.arange(T_MAX, dtype=torch.float64)

            def smallest(scale):
                x = base + scale * steps[:, None] * u
                S = (x @ M @ x.T).masked_fill(~allowed, float("-inf"))
                return torch.softmax(S, -1)[allowed].min(), S, x
            lo, hi = 1e-4, 1e2
            for _ in range(40):                                                 # the spread grows with the scale
                mid = (lo * hi) ** 0.5
                lo, hi = (mid, hi) if smallest(mid)[0] > TINY else (lo, mid)
            low, S, x = smallest(hi)
            A = torch.softmax(S, -1)
            rowmax = S.masked_fill(~allowed, float("-inf")).max(-1).values
            if (0.5 * TINY < low <= TINY and ((A > 1e-5) & (A < 1e-3) & allowed).any()
                    and rowmax.abs().max() < 60 and x.abs().max() < 50):
                rows.append(x.float())
                break
        else:
            raise RuntimeError("no tiny-weights input found for this seed")        # never seen; loud if it is
    return torch.stack(rows)


def _large_input(x, w):
    """x scaled so that its largest |score| is LARGE_SCORE: weights far apart, still finite in float32."""
    S = x.double() @ _scores_of(w) @ x.double().transpose(-2, -1)
    return (x.double() * (LARGE_SCORE / S.abs().max()) ** 0.5).float()


def _huge_input(w):
    """Every token the same vector z, whose score with itself is +HUGE_SCORE: every score is 300, so a softmax
    written as exp(s) / sum exp(s) overflows to inf / inf = NaN on every row, for every draw, while one that
    subtracts the row's max gives uniform weights (as does any other correct order of operations: nothing on this
    input underflows, so only the overflow is tested). z: the top eigenvector of the scores' symmetric part."""
    M = _scores_of(w)
    lam, vec = torch.linalg.eigh((M + M.T) / 2)
    if lam[-1] <= 0:
        raise RuntimeError("no direction with a positive score for the huge-scores input")   # never seen; loud
    z = vec[:, -1] * (HUGE_SCORE / lam[-1]) ** 0.5                        # z^T M z = HUGE_SCORE
    return z.float().expand(B, T_MAX, D).clone()


def make_plan(seed: int = 2024):
    g = generator(seed)                 # the seed's whole width (toolkit/draw.py)
    t = {}
    t.update(_weights(g, "w"))
    t.update(_weights(g, "s", same_qk=True))
    t["s_query"] *= 2.0
    t["s_key"] *= 2.0                                     # scores of order 1-10: a clear softmax temperature
    x = torch.randn(B, T_MAX, D, generator=g)
    change = 10 * torch.randn(B, D, generator=g)      # large, and applied both ways: a leak shows in the bits
    x_pert, x_pert_neg = x.clone(), x.clone()
    x_pert[:, PERTURBED, :], x_pert_neg[:, PERTURBED, :] = change, -change
    perm = _derangement(g)
    pos = torch.randn(T_MAX, D, generator=g)[None]        # (1, T, d) position rows
    tok_table = torch.randn(VOCAB, D, generator=g)
    idx = torch.stack([torch.randperm(VOCAB, generator=g)[:T_MAX] for _ in range(B)])   # distinct: every slot moves
    t.update({
        "x": x, "x_pert": x_pert, "x_pert_neg": x_pert_neg, **_gradient_inputs(x, t, g),
        **{f"x_len{T}": x[:, :T].clone() for T in LENGTHS},
        "x_perm": x[:, perm], "xp": x + pos, "xp_perm": (x + pos)[:, perm],
        "tok": tok_table[idx], "tok_perm": tok_table[idx[:, perm]],
        "tokpos": tok_table[idx] + pos, "tokpos_perm": tok_table[idx[:, perm]] + pos,
        "x_scale": torch.randn(B, T_MAX, D, generator=g), "perm": perm,
    })
    t["x_hull"] = _hull_input(g)
    # Drawn after every earlier input, so those stay as they were for a seed.
    t["x_tiny"] = _tiny_input(t, g)                       # tiny allowed weights, one value for every token
    t["x_large"] = _large_input(x, t)                     # large scores
    t["x_b1"] = x[:1].clone()                             # a batch of one
    t["x_show"] = torch.randn(B, T_MAX, D, generator=g)   # the feedback's picture only: no check reads it
    t["x_huge"] = _huge_input(t)                          # every score 300 (no draw: the seed's inputs stay)
    # A second geometry, for the diagnosis only: a mistake named from sizes (the scale, the mask's length) must
    # be reproduced at both, so a constant that happens to equal d_head or T_max here (a hard-coded 4, the
    # notebook's own T) is not taken for the formula.
    t.update(_weights(g, "g2", d=D2, d_head=D_HEAD2))
    t["x_g2"] = torch.randn(B, T_MAX2, D2, generator=g)
    t[f"x_g2_len{T_G2}"] = t["x_g2"][:, :T_G2].clone()
    causal = {"d": D, "d_head": D_HEAD, "T_max": T_MAX, "causal": True}
    noncausal = dict(causal, causal=False)
    defaults = dict(causal, causal=None)                  # Head(d, d_head, T_max), as the seed builds it
    experiments = [
        {"name": "inspect", "ctor": causal, "op": "inspect", "watch": False},        # never calls forward
        {"name": "causal", "ctor": causal, "weights": "w", "op": "forward",
         "inputs": ["x", "x_pert", "x", "x_pert_neg", "x_hull", "x_tiny", "x_large", "x_show",
                    "x_huge"]},
        {"name": "noncausal", "ctor": noncausal, "weights": "w", "op": "forward",
         "inputs": ["x", "x_perm", "xp", "xp_perm", "tok", "tok_perm", "tokpos", "tokpos_perm", "x_hull", "x_tiny"]},
        # One instance used as a notebook uses it: several lengths, twice on one input, train and eval mode,
        # a batch of one, T = 1, after .to(); its buffers are compared before and after the first call.
        {"name": "state", "ctor": causal, "weights": "w", "op": "calls",
         "calls": [{"what": w, "input": i, "mode": m} for w, i, m in STATE_CALLS]},
        # On the meta device: a tensor forward builds on the CPU (a mask) meets the head's moved ones.
        {"name": "meta", "ctor": causal, "weights": "w", "op": "meta", "inputs": ["x"]},
        {"name": "defaults", "ctor": defaults, "weights": "w", "op": "forward", "inputs": ["x"]},
        *({"name": f"len{T}", "ctor": causal, "weights": "w", "op": "forward", "inputs": [f"x_len{T}"], "then": ["x"]}
          for T in LENGTHS),                              # a short first call, then T_max on the same instance
        {"name": "scaling", "ctor": causal, "weights": "s", "op": "forward", "inputs": ["x_scale"]},
        {"name": "geometry2", "ctor": GEOMETRY2, "weights": "g2", "op": "forward", "inputs": ["x_g2"]},
        {"name": f"geometry2_len{T_G2}", "ctor": GEOMETRY2, "weights": "g2", "op": "forward",
         "inputs": [f"x_g2_len{T_G2}"]},
        {"name": "scaling_noncausal", "ctor": noncausal, "weights": "s", "op": "forward", "inputs": ["x_scale"]},
        {"name": "grad", "ctor": causal, "weights": "w", "op": "backward", "inputs": ["x_late"], "target": list(GRAD_TARGET)},
        {"name": "grad_neg", "ctor": causal, "weights": "w", "op": "backward", "inputs": ["x_late_neg"],
         "target": list(GRAD_TARGET)},
    ]
    return {"tensors": t, "experiments": experiments}
