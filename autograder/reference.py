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


def lm_forward_details(ids, sd, pad_id=0):
    """Reference one-head attention LM (seed 003), float64. ``sd`` maps the contract's parameter names."""
    g = {k: v.double() for k, v in sd.items()}
    B, T = ids.shape
    X = g["token_embedding.weight"][ids] + g["position_embedding.weight"][:T][None]   # (B, T, d)
    Q, K, V = X @ g["W_Q.weight"].T, X @ g["W_K.weight"].T, X @ g["W_V.weight"].T       # (B, T, d_k|d_v)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(g["W_K.weight"].shape[0])             # (B, T, T)
    future = ~causal_mask(T)                                                            # (T, T)
    real = ids.ne(pad_id)                                                               # (B, T)
    padded_key_for_real_query = (~real[:, None, :]) & real[:, :, None]                  # (B, T, T)
    masked = scores.masked_fill(future[None] | padded_key_for_real_query, float("-inf"))
    weights = torch.softmax(masked, dim=-1)                                             # (B, T, T)
    messages = weights @ V                                                              # (B, T, d_v)
    updates = messages @ g["W_O.weight"].T                                              # (B, T, d)
    contextual = X + updates
    hidden = torch.relu(contextual @ g["hidden_layer.weight"].T + g["hidden_layer.bias"])
    logits_all = hidden @ g["vocab_head.weight"].T + g["vocab_head.bias"]               # (B, T, V)
    return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked, weights=weights,
                messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                logits_all=logits_all, logits=logits_all[:, -1, :])
