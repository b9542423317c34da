"""The hidden checks for `TeachingAttentionLM`. Each is a pytest test over the judge's own data.

Verdicts are computed here from arrays the student's process returned for
windows and weights the judge generated (see plan.py). Windows are built as
the notebook builds them (left padding, a real last token), so a correct
`forward` that returns `forward_details(ids)["logits"]` never loses a point.
Padded query rows are not compared with the reference: the contract only
asks that they be finite and sum to 1.
"""
import torch
import torch.nn.functional as F

from .. import reference
from ..measure import require_scale
from ..results import require
from .evidence import fused_in_source, watched_ops
from .plan import B, D_K, OVERFIT, PAD, SEED_PARAMS, T, V, state_dict

ATOL, RTOL = 1e-5, 1e-4
ZERO = 1e-12
RUNS = ("padded", "unpadded")


def _ids(plan, name):
    return plan["tensors"][name]


def _shape(t, shape, what):
    require(tuple(t.shape) == tuple(shape), f"{what} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t


def _weights(results, name):
    return _shape(results.get(name)["d_weights"], (B, T, T), "forward_details()['weights']")


def test_forward_matches_details(results, plan):
    """forward(ids) equals forward_details(ids)['logits'], on padded and unpadded windows."""
    for name in RUNS:
        run = results.get(name)
        fwd = _shape(run["forward"], (B, V), f"forward() on {name} windows")
        det = _shape(run["d_logits"], (B, V), "forward_details()['logits']")
        require(torch.allclose(fwd, det, atol=ATOL, rtol=RTOL),
                f"on {name} windows forward(ids) differs from forward_details(ids)['logits'] by up to "
                f"{(fwd - det).abs().max():.3g}; both must compute the last position's logits the same way")


def test_no_future_weight(results, plan):
    """No weight on future keys (j > i), for every query row."""
    future = ~reference.causal_mask(T)
    for name in RUNS:
        leak = _weights(results, name)[:, future].abs().max().item()
        require(leak <= ZERO, f"on {name} windows the attention gives weight {leak:.3g} to future keys (j > i)")


def test_rows_sum_to_one(results, plan):
    """Every row of the weights sums to 1 and every tensor is finite, padded rows included."""
    for name in RUNS:
        run = results.get(name)
        W = _weights(results, name)
        for key, t in run.arrays.items():
            if key.startswith("d_") and key != "d_masked_scores":
                require(torch.isfinite(t).all(), f"on {name} windows forward_details()['{key[2:]}'] contains "
                                                 "NaN or inf (is a whole row masked, e.g. a padded query?)")
        require((W >= 0).all(), "attention weights are negative somewhere")
        err = (W.sum(-1) - 1).abs().max().item()
        require(err <= ATOL, f"on {name} windows rows of the weights do not sum to 1 (error {err:.3g}); "
                             "normalise over the key axis, after masking")


def test_future_edit(results, plan):
    """Editing the last token leaves the earlier positions' representations unchanged."""
    a = results.get("unpadded")["d_contextual"]
    b = results.get("edit")["d_contextual"]
    change = (a[:, :-1] - b[:, :-1]).abs().max().item()
    require(change < 1e-6, f"editing the last token changed earlier contextual rows by up to {change:.3g}: "
                           "information flows from the future")


def test_finite_gradients(results, plan):
    """A cross-entropy loss on forward() gives finite gradients that reach every parameter."""
    run = results.get("grad")
    names = run.meta.get("parameters", [])
    require(names, "the model has no parameters")
    for n in names:
        g = run.arrays.get(f"grad:{n}")
        require(g is not None, f"no gradient reaches {n}: the parameter is not used by forward "
                               "(or something is detached)")
        require(torch.isfinite(g).all(), f"the gradient of {n} contains NaN or inf")
    for n in ("W_Q.weight", "W_K.weight", "W_V.weight", "W_O.weight", "position_embedding.weight"):
        g = run.arrays.get(f"grad:{n}")
        require(g is not None and g.abs().max() > 0, f"the gradient of {n} is zero: the attention path "
                                                     "does not reach the loss")


def test_tiny_batch_overfit(results, plan):
    """The model can memorise 16 targets: loss < min(0.15, initial / 10) within 220 AdamW steps."""
    run = results.get("overfit")
    y = plan["tensors"]["overfit_y"]
    shape = (OVERFIT["n"], OVERFIT["vocab_size"])
    before = F.cross_entropy(_shape(run["logits_before"], shape, "forward() output"), y).item()
    after = F.cross_entropy(_shape(run["logits_after"], shape, "forward() output"), y).item()
    limit = min(0.15, before / 10)
    require(after < limit, f"tiny-batch overfit failed: loss {before:.3f} -> {after:.4f} after "
                           f"{OVERFIT['steps']} steps, needs < {limit:.3f}; a correct model memorises 16 targets")


def test_padded_keys(results, plan):
    """Real queries put no weight on padded keys."""
    ids = _ids(plan, "padded")
    W = _weights(results, "padded")
    real = ids.ne(PAD)
    bad = (~real[:, None, :]) & real[:, :, None]                               # (B, T, T)
    leak = W[bad].abs().max().item()
    require(leak <= ZERO, f"a real token's query gives weight {leak:.3g} to padded keys; mask keys whose id "
                          "is pad_id for real queries")


def test_equivariance(results, plan):
    """Permuting earlier tokens: last-position logits unchanged without position rows, changed with them."""
    plain = results.get("permuted_no_positions")
    require(torch.allclose(plain["out0"], plain["out1"], atol=ATOL, rtol=RTOL),
            "with zero position rows, permuting the earlier tokens changed the last position's logits: "
            "attention over a set of keys must not depend on their order (Thm 6.1)")
    pos = results.get("permuted")
    require(not torch.allclose(pos["out0"], pos["out1"], atol=1e-3),
            "with position rows, permuting the earlier tokens left the logits unchanged: the position "
            "rows must be added to the token rows (Cor 6.2), and the scores must depend on content")


def test_parameter_count(results, plan):
    """The contract: 331,132 parameters at the seed's sizes (vocabulary 1,500, context 12), every one used by
    forward, and the one head built by hand: no library attention module, and no fused attention ran (the
    child's operator watch) or is named (the source)."""
    meta = results.get("inspect").meta
    n, used = meta.get("seed_size_parameters"), meta.get("seed_size_parameters_used")
    require(n == SEED_PARAMS, f"TeachingAttentionLM(1500, 12) has {n:,} trainable parameters, expected "
                              f"{SEED_PARAMS:,}: check biases (none on W_Q, W_K, W_V, W_O) and layer sizes")
    require(used == n, f"only {used:,} of the {n:,} parameters receive a gradient from forward(): some "
                       "layer is never used (W_O?) or something is detached")
    require(meta.get("padding_idx") == PAD, "token_embedding must be nn.Embedding(..., padding_idx=pad_id)")
    banned = {"MultiheadAttention", "LayerNorm"} & set(meta.get("modules", []))
    require(not banned, f"the model uses {', '.join(sorted(banned))}, which this assignment builds by hand")
    ran, tampered = watched_ops(results)
    require(not ran, f"your model ran torch's fused attention ({', '.join(ran)}): this assignment builds "
                     "the scores, masks and softmax by hand")
    require(not tampered, "your code switched off the grader's operator recording (torch's profiler or its "
                          "torch-function modes) while it ran: the model must run without profiling itself or "
                          "disabling torch functions")
    named = fused_in_source(results)
    require(not named, f"the model uses {', '.join(named)}: this assignment builds the scores, masks and "
                       "softmax by hand")


def test_scaling(results, plan):
    """Scores are divided by sqrt(d_k), visible because d_k != d_model."""
    sd = state_dict(plan, "s")
    ref = reference.lm_forward_details(_ids(plan, "unpadded"), sd, PAD)
    S = ref["Q"] @ ref["K"].transpose(-2, -1)                                  # (B, T, T) unscaled
    require_scale(_weights(results, "scaling"), S, reference.causal_mask(T).expand(B, -1, -1), D_K, "d_k")


def test_reference_agreement(results, plan):
    """Given the same weights, logits and weights agree with a correct model (real query rows)."""
    sd = state_dict(plan, "w")
    for name in RUNS:
        run = results.get(name)
        ids = _ids(plan, name)
        ref = reference.lm_forward_details(ids, sd, PAD)
        real = ids.ne(PAD)
        for key in ("weights", "contextual", "logits_all"):
            got = run[f"d_{key}"]
            require(got.shape == ref[key].shape, f"forward_details()['{key}'] has shape {tuple(got.shape)}, "
                                                 f"expected {tuple(ref[key].shape)}")
            ok = torch.allclose(got[real], ref[key][real], atol=ATOL, rtol=RTOL)
            err = (got[real] - ref[key][real]).abs().max().item()
            require(ok, f"on {name} windows, given the same weights, forward_details()['{key}'] differs from "
                        f"a correct model by up to {err:.3g} on real tokens")
        require(torch.allclose(run["forward"], ref["logits"], atol=ATOL, rtol=RTOL),
                f"on {name} windows forward() differs from a correct model given the same weights")
