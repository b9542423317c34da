"""Measurements the checks of attention share (the scaling of a softmax over scores)."""
import math

import torch

from attnkit.toolkit.require import require


def softmax_temperature(A, S, allowed):
    """Fit c in A_ij ∝ exp(c * S_ij) over the allowed entries of each row; return (c, worst residual).

    A, S: (B, T, T); allowed: (B, T, T) bool. Rows with fewer than two positive allowed weights are
    skipped. A student's softmax, however written, is exp(c S) renormalised, so the log-ratios are exact.
    """
    ys, zs = [], []
    for b in range(A.shape[0]):
        for i in range(A.shape[1]):
            js = [j for j in range(A.shape[2]) if allowed[b, i, j] and A[b, i, j] > 1e-30]
            if len(js) >= 2:
                la, s = torch.log(A[b, i, js]), S[b, i, js]
                ys.append(la - la.mean())
                zs.append(s - s.mean())
    require(zs, "could not measure the scaling: no row of the attention weights has two non-zero entries")
    y, z = torch.cat(ys), torch.cat(zs)
    c = (y @ z / (z @ z)).item()
    return c, (y - c * z).abs().max().item() / max(1.0, y.abs().max().item())


def require_scale(A, S, allowed, d_k: int, name: str = "d_head") -> None:
    require(torch.isfinite(A).all(), "the attention weights contain NaN or inf")
    c, resid = softmax_temperature(A, S, allowed)
    require(resid < 1e-3, "the weights are not a softmax of the query-key scores: log-weight differences "
                          "do not follow the score differences")
    want = 1 / math.sqrt(d_k)
    measured = "no scaling at all" if abs(c - 1) < 1e-3 else f"division by {1 / c:.4g}" if c > 0 else f"factor {c:.3g}"
    require(abs(c / want - 1) < 1e-3, f"the scores are scaled wrongly: measured {measured}, expected division "
                                      f"by sqrt({name}) = sqrt({d_k}) = {math.sqrt(d_k):g}")
