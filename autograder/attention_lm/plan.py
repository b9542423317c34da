"""Judge side: weights, windows and experiments for the hidden checks of `TeachingAttentionLM`.

Tiny sizes with d_k != d_v != d_model, so scaling by the model width and mixed-up
projections are visible. Windows are built as the notebook builds them: left
padding, and a real token in the last slot. Every experiment, the tiny-batch
overfit's training steps included, runs under the child's operator watch
(op_watch.py), which reports the fused attention it ran (``"watch": False``
would leave one out).
"""
from pathlib import Path

import torch

from attnkit.toolkit.draw import generator

V, T, D_MODEL, D_K, D_V, HIDDEN, PAD, B = 23, 6, 8, 4, 6, 10, 0, 4
# The scaling run's width of the queries and keys: 4, the other runs' d_k, is the one width where d_k / 2 (`d_k ** 1/2`
# as Python reads it) and a constant 2 equal sqrt(d_k) (blind set 11: such a model kept every point); at 9 neither does.
D_K_SCALING = 9
OTHER_PAD = 3                           # a model built with pad_id=3 must mask id 3, and read id 0 as a word
SEED_SIZES = {"vocab_size": 1500, "context_len": 12}        # the seed's model: 331,132 parameters
SEED_PARAMS = 331_132
DEFAULTS = {"d_model": 48, "d_k": 48, "d_v": 48, "hidden": 160, "pad_id": 0}   # the contract's defaults
SHORT = tuple(range(1, T))              # window lengths below context_len (T itself: the padded/unpadded runs)
# The notebook's own overfit (16 windows, 220 steps, its widths), over 200 words rather than the corpus's 1,500: the
# vocabulary head on every position was three quarters of a judged submission's time (bench/floor.py), and what the
# check measures, that gradients reach every weight and the model can memorise, does not depend on the vocabulary.
OVERFIT = {"vocab_size": 200, "context_len": 12, "d_model": 32, "d_k": 32, "d_v": 32, "hidden": 96,
           "n": 16, "steps": 220, "lr": 1e-2, "seed": 31}
HELPERS = Path(__file__).resolve().with_name("source")
TINY = 1e-6           # the smallest allowed weight (real query rows) of the tiny-weights run: far above underflow
NEAR_TIE = 1e-4       # W_Q scaled by this: every allowed score within ~1e-4 of the others (near ties)
STATE_T = 3           # the shorter length of the calls on one instance (longer, shorter, longer again)
# (what the call is, input, mode) on ONE instance, in this order (drive._calls). Eval mode is the model's mode for
# every value the checks read, as the notebook's own checks (wordlm.attention_invariants) measure it: dropout
# that training switches on is the student's to use; train mode is called only to measure randomness.
STATE_CALLS = (
    (f"first call, T = {T}", "unpadded", "eval"), (f"then T = {STATE_T}", f"len{STATE_T}", "eval"),
    (f"then T = {STATE_T} with another last token", f"len{STATE_T}_edit", "eval"),
    (f"then T = {T} again", "unpadded", "eval"), ("the same windows again", "unpadded", "eval"),
    ("in train mode", "unpadded", "train"), ("in train mode, again", "unpadded", "train"),
    ("a batch of one", "b1", "eval"), ("T = 1", "len1", "eval"), ("after .to('cpu')", "unpadded", "to"))

SHAPES = {"token_embedding.weight": (V, D_MODEL), "position_embedding.weight": (T, D_MODEL),
          "W_Q.weight": (D_K, D_MODEL), "W_K.weight": (D_K, D_MODEL), "W_V.weight": (D_V, D_MODEL),
          "W_O.weight": (D_MODEL, D_V), "hidden_layer.weight": (HIDDEN, D_MODEL), "hidden_layer.bias": (HIDDEN,),
          "vocab_head.weight": (V, HIDDEN), "vocab_head.bias": (V,)}


def _state(g, prefix, scale=1.0):
    sd = {f"{prefix}.{k}": torch.randn(*s, generator=g) * (scale / s[-1] ** 0.5 if len(s) > 1 else 0.1)
          for k, s in SHAPES.items()}
    sd[f"{prefix}.token_embedding.weight"] = torch.randn(V, D_MODEL, generator=g)
    sd[f"{prefix}.token_embedding.weight"][PAD] = 0.0          # padding_idx row, as nn.Embedding keeps it
    sd[f"{prefix}.position_embedding.weight"] = torch.randn(T, D_MODEL, generator=g)
    return sd


def _real(g, *shape):
    return torch.randint(1, V, shape, generator=g)


def _short_windows(g, L):
    """Windows of length L as the notebook builds them: one unpadded, the others left-padded (last slot real)."""
    pads = sorted({1, L // 2, L - 1} - {0}) if L > 1 else []
    ids = _real(g, 1 + len(pads), L)
    for row, p in enumerate(pads, start=1):
        ids[row, :p] = PAD
    return ids


def _edited(ids):
    """A different real token in the last slot."""
    out = ids.clone()
    out[:, -1] = (ids[:, -1] % (V - 1)) + 1
    return out


def make_plan(seed: int = 2025):
    g = generator(seed)                 # the seed's whole width (toolkit/draw.py)
    t = {}
    t.update(_state(g, "w", scale=2.0))
    t.update({k.replace("w.", "wz.", 1): v.clone() for k, v in t.items()})
    t["wz.position_embedding.weight"].zero_()                      # no position rows
    t.update(_state(g, "s", scale=3.0))      # its W_Q and W_K are replaced at d_k = D_K_SCALING below (drawn here,
                                            # so every later draw is as it was)

    unpadded = _real(g, B, T)
    padded = _real(g, B, T)
    padded[0, :2] = PAD
    padded[1, :4] = PAD
    padded[2, :5] = PAD                                           # a single real token
    edit = unpadded.clone()
    edit[:, -1] = (unpadded[:, -1] % (V - 1)) + 1                  # a different real token at the end
    _flatten(t, "wz", unpadded)
    t["wf.W_Q.weight"] = t["w.W_Q.weight"].clone()                 # an overlay of `w` (OVERLAYS): W_Q alone is sent
    _flatten(t, "wf", unpadded, largest=3.0)
    perm = torch.tensor([2, 0, 4, 1, 3])                          # permutes the T-1 earlier slots
    permuted = torch.cat([unpadded[:, :-1][:, perm], unpadded[:, -1:]], dim=1)
    n = OVERFIT["n"]
    torch.randint(3, OVERFIT["vocab_size"], (n, OVERFIT["context_len"]), generator=g)   # drawn, so later draws
    # are as before; the overfit's 16 windows and targets are the same under every key (the model's start is
    # already seeded): whether a model memorises them within the steps is what the check measures, and a model near
    # the limit (keys from W_Q) lost it under some keys only (bench/key_dependence.py)
    fixed = generator(OVERFIT["seed"])
    ofx = torch.randint(3, OVERFIT["vocab_size"], (n, OVERFIT["context_len"]), generator=fixed)
    for i in range(0, n, 4):
        ofx[i, : i // 2] = PAD
    seed_windows = torch.randint(3, SEED_SIZES["vocab_size"], (2, SEED_SIZES["context_len"]), generator=g)
    seed_windows[1, :5] = PAD
    t.update({"seed_windows": seed_windows, "padded": padded, "unpadded": unpadded, "edit": edit, "permuted": permuted,
              "targets": _real(g, B), "overfit_x": ofx,
              "overfit_y": torch.randint(3, OVERFIT["vocab_size"], (n,), generator=fixed)})
    torch.randint(3, OVERFIT["vocab_size"], (n,), generator=g)             # drawn: later draws as before
    for L in SHORT:                                               # drawn last: earlier draws unchanged
        t[f"len{L}"] = _short_windows(g, L)
        t[f"len{L}_edit"] = _edited(t[f"len{L}"])
    t.update({k.replace("w.", "wp.", 1): v.clone() for k, v in t.items() if k.startswith("w.")})
    t["wp.token_embedding.weight"][PAD] = torch.randn(D_MODEL, generator=g)       # id 0 is a word here
    t["wp.token_embedding.weight"][OTHER_PAD] = 0.0
    other = _real(g, B, T)
    other[other == OTHER_PAD] = PAD
    other[0, 3] = other[3, 2] = PAD                                 # real tokens with id 0
    other[0, :2] = OTHER_PAD
    other[1, :4] = OTHER_PAD
    other[2, :5] = OTHER_PAD
    t["other_pad"] = other
    # The scaling run's W_Q and W_K at d_k = D_K_SCALING (drawn after the rest: earlier draws unchanged), W_K = W_Q
    # as before (symmetric scores: the operands' order is not the temperature's business).
    t["s.W_Q.weight"] = torch.randn(D_K_SCALING, D_MODEL, generator=g) * (3.0 / D_MODEL ** 0.5)
    t["s.W_K.weight"] = t["s.W_Q.weight"].clone()

    t["b1"] = unpadded[:1].clone()                                 # a batch of one
    # Inputs built to stress the weights, not left to the draw: the same windows under W_Q scaled so that the
    # smallest allowed weight of a real query is about TINY (a weight pruned or underflowed shows), and under W_Q
    # scaled down to near ties (every allowed weight close to 1/(allowed keys): a threshold or a mask by value shows).
    # Only W_Q is sent for them (OVERLAYS: the rest is `w`'s), so the plan stays within the wire's array count.
    t["wt.W_Q.weight"] = t["w.W_Q.weight"] * _tiny_scale(state_dict({"tensors": t}, "w"), padded)
    t["wn.W_Q.weight"] = t["w.W_Q.weight"] * NEAR_TIE

    ctor = {"vocab_size": V, "context_len": T, "d_model": D_MODEL, "d_k": D_K, "d_v": D_V, "hidden": HIDDEN,
            "pad_id": PAD}
    experiments = [
        {"name": "inspect", "ctor": ctor, "op": "inspect", "seed_args": list(SEED_SIZES.values()),
         "inputs": ["seed_windows"]},
        *({"name": f"len{L}", "ctor": ctor, "weights": "w", "op": "details", "inputs": [f"len{L}"],
           "edited": f"len{L}_edit"} for L in SHORT),
        {"name": "padded", "ctor": ctor, "weights": "w", "op": "details", "inputs": ["padded"]},
        {"name": "other_pad_id", "ctor": ctor | {"pad_id": OTHER_PAD}, "weights": "wp", "op": "details",
         "inputs": ["other_pad"]},
        {"name": "unpadded", "ctor": ctor, "weights": "w", "op": "details", "inputs": ["unpadded"]},
        {"name": "edit", "ctor": ctor, "weights": "w", "op": "details", "inputs": ["edit"]},
        {"name": "scaling", "ctor": ctor | {"d_k": D_K_SCALING}, "weights": "s", "op": "details",
         "inputs": ["unpadded"]},
        {"name": "tiny_weights", "ctor": ctor, "weights": ["w", "wt"], "op": "details", "inputs": ["padded"]},
        {"name": "near_ties", "ctor": ctor, "weights": ["w", "wn"], "op": "details", "inputs": ["padded"]},
        # One instance used as a notebook uses it: several lengths, twice on one input, train and eval mode,
        # a batch of one, T = 1, after .to(); its buffers are compared before and after the first call.
        {"name": "state", "ctor": ctor, "weights": "w", "op": "calls",
         "calls": [{"what": w, "input": i, "mode": m} for w, i, m in STATE_CALLS]},
        # On the meta device, after one call on the CPU: a tensor forward builds on the CPU (a mask, positions),
        # or one kept from the first call in a plain attribute, meets the model's moved ones.
        {"name": "meta", "ctor": ctor, "weights": "w", "op": "meta", "inputs": ["padded"]},
        {"name": "permuted", "ctor": ctor, "weights": ["w", "wf"], "op": "forward", "inputs": ["unpadded", "permuted"]},
        {"name": "permuted_no_positions", "ctor": ctor, "weights": "wz", "op": "forward",
         "inputs": ["unpadded", "permuted"]},
        {"name": "grad", "ctor": ctor, "weights": "w", "op": "backward", "inputs": ["padded"], "targets": "targets"},
        # The same in eval mode (a train-only dropout is the release's freedom): its gradients are a correct
        # model's, which the forward values alone do not show (blind set 10: a residual of X.detach()).
        {"name": "grad_eval", "ctor": ctor, "weights": "w", "op": "backward", "eval": True, "inputs": ["padded"],
         "targets": "targets"},
        {"name": "overfit", "ctor": {k: OVERFIT[k] for k in ("vocab_size", "context_len", "d_model", "d_k",
                                                            "d_v", "hidden")} | {"pad_id": PAD},
         "op": "overfit", "inputs": ["overfit_x"], "targets": "overfit_y",
         "steps": OVERFIT["steps"], "lr": OVERFIT["lr"], "seed": OVERFIT["seed"]},
    ]
    modules = {"wordlm": (HELPERS / "wordlm.py").read_text()}
    return {"tensors": t, "experiments": experiments, "modules": modules}


def _flatten(t, prefix, ids, largest=1.0):
    """W_Q of ``prefix`` scaled so that no score on ``ids`` exceeds ``largest`` in size: no row saturates, and with 1
    every allowed weight is far from 0, so whatever moves one (dropout left on in eval mode, say) moves the logits
    on every draw, not on some. (With 3, the order check's own: a row saturated on one key, a query that is its own
    key, say, hid what permuting the others' positions does, on some draws only.)"""
    from .reference import lm_forward_details
    sd = state_dict({"tensors": t}, prefix)
    scores = lm_forward_details(ids, sd, PAD)["scores"]                    # (B, T, T)
    t[f"{prefix}.W_Q.weight"] = t[f"{prefix}.W_Q.weight"] * (largest / scores.abs().max().float())


def _tiny_scale(sd, ids):
    """The factor on W_Q that makes the smallest allowed weight of a real query on ``ids`` about TINY."""
    from .reference import lm_forward_details
    real = ids.ne(PAD)
    masked = lm_forward_details(ids, sd, PAD)["masked_scores"]      # (B, T, T): linear in W_Q, -inf where blocked

    def smallest(c):                                           # W_Q * c scales every score by c: one forward, not 40
        W = torch.softmax(masked * c, dim=-1)[real]
        return W[W > 0].min().item()
    lo, hi = 1.0, 1e3
    for _ in range(40):                                        # the spread grows with the scale
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if smallest(mid) > TINY else (lo, mid)
    return hi


def stress_runs():
    """(experiment name, weights prefix, how a message names it) of the runs built to stress the weights."""
    return [("tiny_weights", "wt", f"padded windows whose smallest allowed weights are about {TINY:g}"),
            ("near_ties", "wn", "padded windows whose allowed scores are nearly tied")]


def length_runs():
    """(experiment name, window length) of every run of forward_details on the judge's weights `w`."""
    return [(f"len{L}", L) for L in SHORT] + [("unpadded", T), ("padded", T)]


OVERLAYS = {"wt": "w", "wn": "w", "wf": "w"}      # prefix -> the weights it changes (drive._build loads the base first)


def state_dict(plan, prefix):
    own = {k[len(prefix) + 1:]: v for k, v in plan["tensors"].items() if k.startswith(prefix + ".")}
    return dict(state_dict(plan, OVERLAYS[prefix]), **own) if prefix in OVERLAYS else own
