"""The judge's own attention, in float64: what a correct head computes from given weights."""
import math

import torch


def causal_mask(T: int) -> torch.Tensor:
    return torch.tril(torch.ones(T, T, dtype=torch.bool))                    # (T, T)


def head_forward(x, w_query, w_key, w_value, causal=True):
    """Reference single head. x (B, T, d); w_* (d_head, d) as stored by nn.Linear."""
    x = x.double()
    q, k, v = x @ w_query.double().T, x @ w_key.double().T, x @ w_value.double().T   # (B, T, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(w_key.shape[0])             # (B, T, T)
    if causal:
        scores = scores.masked_fill(~causal_mask(x.shape[1]), float("-inf"))
    A = torch.softmax(scores, dim=-1)                                        # (B, T, T)
    return A @ v, A                                                          # (B, T, d_head), (B, T, T)


def lm_forward_details(ids, sd, pad_id=0, *, pad_mask="real_queries", future=True, scale="d_k", axis=-1,
                       positions=True, residual=True, relu=True, readout=-1, after_softmax=False,
                       fill=float("-inf"), triangle="future", key="key", positions_from_end=False):
    """Reference one-head attention LM (seed 003), float64. ``sd`` maps the contract's parameter names.

    The keyword arguments describe known mistakes (the diagnosis compares a submission with them);
    the defaults are the correct model.
    """
    g = {k: v.double() for k, v in sd.items()}
    B, T = ids.shape
    rows = g["position_embedding.weight"]
    rows = rows[rows.shape[0] - T:] if positions_from_end else rows[:T]          # slots 0..T-1, or the last T
    X = g["token_embedding.weight"][ids] + positions * rows[None]                        # (B, T, d)
    Q, K, V = X @ g["W_Q.weight"].T, X @ g[f"W_{key[0].upper()}.weight"].T, X @ g["W_V.weight"].T  # (B, T, d_k|d_v)
    d_k = g["W_K.weight"].shape[0]
    divisor = {"d_k": math.sqrt(d_k), "d_model": math.sqrt(X.shape[-1]), "none": 1.0, "d_k_unrooted": d_k}[scale]
    scores = Q @ K.transpose(-2, -1) / divisor                                          # (B, T, T)
    real = ids.ne(pad_id)                                                               # (B, T)
    blocked = torch.zeros(B, T, T, dtype=torch.bool)
    if future:       # the future (j > i); the mistakes: the past (j < i), or the future and the diagonal (j >= i)
        allowed = {"future": causal_mask(T), "past": causal_mask(T).T, "diagonal": causal_mask(T).tril(-1)}[triangle]
        blocked |= ~allowed[None]
    if pad_mask == "real_queries":
        blocked |= (~real[:, None, :]) & real[:, :, None]
    elif pad_mask == "all_queries":
        blocked |= (~real[:, None, :]).expand(B, T, T)
    if after_softmax:                    # the mistake: softmax over every key, masked weights zeroed afterwards
        masked = scores
        weights = torch.softmax(scores, dim=axis).masked_fill(blocked, 0.0)
    else:
        masked = scores.masked_fill(blocked, fill)
        weights = torch.softmax(masked, dim=axis)                                       # (B, T, T)
    messages = weights @ V                                                              # (B, T, d_v)
    updates = messages @ g["W_O.weight"].T                                              # (B, T, d)
    contextual = X + updates if residual else updates
    hidden = contextual @ g["hidden_layer.weight"].T + g["hidden_layer.bias"]
    hidden = torch.relu(hidden) if relu else hidden
    logits_all = hidden @ g["vocab_head.weight"].T + g["vocab_head.bias"]               # (B, T, V)
    return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked, weights=weights,
                messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                logits_all=logits_all, logits=logits_all[:, readout, :])


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
