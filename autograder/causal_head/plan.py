"""Judge side: the inputs and experiments the hidden checks run on a student's `Head`.

Everything is generated here, in the judge's process, from fixed seeds. Shapes
are tiny so a whole class grades in seconds, and d != d_head so that scaling
by the model width instead of the head width is visible. Every experiment that
calls forward runs under the child's operator watch (op_watch.py), which
reports the fused attention it ran; ``"watch": False`` leaves one out.
"""
import torch

D, D_HEAD, T_MAX, B = 8, 4, 6, 2
LENGTHS = tuple(range(1, T_MAX))   # every T < T_max, one experiment each, so a failure names its lengths
PERTURBED = 3          # position changed in the causality-by-perturbation run
GRAD_TARGET = (0, 3)   # (batch, position) whose output is differentiated (the visible cell's position)
VOCAB = 11


def _weights(g, prefix, same_qk=False):
    w = {f"{prefix}_{n}": torch.randn(D_HEAD, D, generator=g) / D**0.5 for n in ("query", "key", "value")}
    if same_qk:        # symmetric scores: the scaling fit cannot be fooled by a transposed score matrix
        w[f"{prefix}_key"] = w[f"{prefix}_query"].clone()
    return w


def _late_token(x, g):
    """x with a large last token, one way and the other: for one of them it dominates every row's scores, so
    a gradient that leaks into the future (through a max over the whole row, say) cannot hide in the data."""
    change = 10 * torch.randn(x.shape[0], x.shape[-1], generator=g)
    late, late_neg = x.clone(), x.clone()
    late[:, -1], late_neg[:, -1] = change, -change
    return {"x_late": late, "x_late_neg": late_neg}


def make_plan(seed: int = 2024):
    g = torch.Generator().manual_seed(seed)
    t = {}
    t.update(_weights(g, "w"))
    t.update(_weights(g, "s", same_qk=True))
    t["s_query"] *= 2.0
    t["s_key"] *= 2.0                                     # scores of order 1-10: a clear softmax temperature
    x = torch.randn(B, T_MAX, D, generator=g)
    change = 10 * torch.randn(B, D, generator=g)      # large, and applied both ways: a leak shows in the bits
    x_pert, x_pert_neg = x.clone(), x.clone()
    x_pert[:, PERTURBED, :], x_pert_neg[:, PERTURBED, :] = change, -change
    perm = torch.randperm(T_MAX, generator=g)
    pos = torch.randn(T_MAX, D, generator=g)[None]        # (1, T, d) position rows
    tok_table = torch.randn(VOCAB, D, generator=g)
    idx = torch.randint(0, VOCAB, (B, T_MAX), generator=g)
    t.update({
        "x": x, "x_pert": x_pert, "x_pert_neg": x_pert_neg, **_late_token(x, g),
        **{f"x_len{T}": x[:, :T].clone() for T in LENGTHS},
        "x_perm": x[:, perm], "xp": x + pos, "xp_perm": (x + pos)[:, perm],
        "tok": tok_table[idx], "tok_perm": tok_table[idx[:, perm]],
        "tokpos": tok_table[idx] + pos, "tokpos_perm": tok_table[idx[:, perm]] + pos,
        "x_scale": torch.randn(B, T_MAX, D, generator=g), "perm": perm,
    })
    causal = {"d": D, "d_head": D_HEAD, "T_max": T_MAX, "causal": True}
    noncausal = dict(causal, causal=False)
    defaults = dict(causal, causal=None)                  # Head(d, d_head, T_max), as the seed builds it
    experiments = [
        {"name": "inspect", "ctor": causal, "op": "inspect", "watch": False},        # never calls forward
        {"name": "causal", "ctor": causal, "weights": "w", "op": "forward", "inputs": ["x", "x_pert", "x", "x_pert_neg"]},
        {"name": "noncausal", "ctor": noncausal, "weights": "w", "op": "forward",
         "inputs": ["x", "x_perm", "xp", "xp_perm", "tok", "tok_perm", "tokpos", "tokpos_perm"]},
        {"name": "defaults", "ctor": defaults, "weights": "w", "op": "forward", "inputs": ["x"]},
        *({"name": f"len{T}", "ctor": causal, "weights": "w", "op": "forward", "inputs": [f"x_len{T}"]}
          for T in LENGTHS),
        {"name": "scaling", "ctor": causal, "weights": "s", "op": "forward", "inputs": ["x_scale"]},
        {"name": "grad", "ctor": causal, "weights": "w", "op": "backward", "inputs": ["x_late"], "target": list(GRAD_TARGET)},
        {"name": "grad_neg", "ctor": causal, "weights": "w", "op": "backward", "inputs": ["x_late_neg"],
         "target": list(GRAD_TARGET)},
    ]
    return {"tensors": t, "experiments": experiments}
