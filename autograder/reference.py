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
