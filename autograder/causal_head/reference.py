"""The judge's own head, in float64: what a correct head computes from given weights, and what known
mistakes compute from the same (for the diagnosis)."""
import math

import torch

from attnkit.toolkit.reference import causal_mask


def head_forward(x, w_query, w_key, w_value, causal=True):
    """Reference single head. x (B, T, d); w_* (d_head, d) as stored by nn.Linear."""
    x = x.double()
    q, k, v = x @ w_query.double().T, x @ w_key.double().T, x @ w_value.double().T   # (B, T, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(w_key.shape[0])             # (B, T, T)
    if causal:
        scores = scores.masked_fill(~causal_mask(x.shape[1]), float("-inf"))
    A = torch.softmax(scores, dim=-1)                                        # (B, T, T)
    return A @ v, A                                                          # (B, T, d_head), (B, T, T)


def head_with_mask(x, w_query, w_key, w_value, allowed):
    """The reference head with the given (T, T) boolean mask in place of the causal one: a mask mistake
    reproduced (a row with nothing allowed is NaN, as a student's head gives it)."""
    x = x.double()
    q, k, v = x @ w_query.double().T, x @ w_key.double().T, x @ w_value.double().T   # (B, T, d_head)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(w_key.shape[0])).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                                  # (B, T, d_head)


def head_weight_variants(x, w_query, w_key, w_value, causal=True):
    """Attention weights of a correct head and of known mistakes, on the same input and weights (float64)."""
    x = x.double()
    q, k = x @ w_query.double().T, x @ w_key.double().T
    T, d, d_head = x.shape[1], x.shape[-1], w_key.shape[0]
    S = q @ k.transpose(-2, -1)                                                         # (B, T, T) unscaled
    keep = causal_mask(T) if causal else torch.ones(T, T, dtype=torch.bool)
    ninf = float("-inf")

    def attn(scores, allowed=keep, dim=-1, fill=ninf):
        return torch.softmax(scores.masked_fill(~allowed, fill), dim=dim)

    s = S / math.sqrt(d_head)
    uniform = keep.double() / keep.double().sum(-1, keepdim=True)
    return {
        "correct": attn(s),
        "mask_after_softmax": torch.softmax(s, -1) * keep,
        "no_scale": attn(S),
        "divide_by_dk": attn(S / d_head),
        "scale_by_model_width": attn(S / math.sqrt(d)),
        "softmax_wrong_axis": attn(s, dim=-2),
        "future_triangle": attn(s, allowed=~causal_mask(T)) if causal else None,
        "diagonal_masked": attn(s, allowed=torch.tril(torch.ones(T, T, dtype=torch.bool), -1)) if causal else None,
        "mask_never_applied": torch.softmax(s, -1),
        "mask_filled_with_zero": attn(s, fill=0.0),
        "scores_transposed": attn(s.transpose(-2, -1)),
        "key_from_query": attn((q @ q.transpose(-2, -1)) / math.sqrt(d_head)),
        "running_mean": uniform.expand_as(S).clone(),
        "softmax_over_batch": attn(s, dim=0),
        "mask_fill_positive": attn(s, fill=1e9),
        "scale_multiplied": attn(S * math.sqrt(d_head)),
        "mask_upper_triangle": attn(s, allowed=torch.ones(T, T, dtype=torch.bool).triu()) if causal else None,
        "softmax_not_normalised": torch.exp(s.masked_fill(~keep, ninf)),
        **{f"mask_band_{w}": attn(s, allowed=keep & torch.ones(T, T, dtype=torch.bool).triu(-w))
           for w in range(1, T - 1) if causal},                  # j in i-w .. i: a local window, not causal
    }


ROLES = ("query", "key", "value")


def head_role_variants(x, w_query, w_key, w_value, causal=True):
    """(output, weights) of heads whose q, k, v come from other layers than self.query, self.key, self.value:
    {(layer making q, layer making k, layer making v): (out, A)} over every assignment but the right one."""
    w = dict(zip(ROLES, (w_query, w_key, w_value)))
    return {(a, b, c): head_forward(x, w[a], w[b], w[c], causal=causal)
            for a in ROLES for b in ROLES for c in ROLES if (a, b, c) != ROLES}


def unshifted_softmax_weights(x, w_query, w_key, w_value):
    """The causal weights of a softmax written as exp(s) / sum exp(s) without subtracting the max, in float32 as a
    student's head runs it: the future masked with -inf before exp(), or removed by multiplying after it. On scores
    above 88.7 exp() overflows and they are NaN where a correct head's are finite (the overflow reproduced)."""
    x = x.float()
    q, k = x @ w_query.float().T, x @ w_key.float().T                              # (B, T, d_head)
    s = q @ k.transpose(-2, -1) / math.sqrt(w_key.shape[0])                        # (B, T, T)
    keep = causal_mask(x.shape[1])
    e = s.masked_fill(~keep, float("-inf")).exp()
    m = s.exp() * keep
    return [e / e.sum(-1, keepdim=True), m / m.sum(-1, keepdim=True)]
