"""The judge's own one-head attention LM (seed 003), in float64, with the known mistakes as options."""
import math

import torch

from attnkit.toolkit.reference import causal_mask


def lm_forward_details(ids, sd, pad_id=0, *, pad_mask="real_queries", future=True, scale="d_k", axis=-1,
                       positions=True, residual=True, relu=True, readout=-1, after_softmax=False,
                       fill=float("-inf"), triangle="future", key="key", positions_from_end=False, nan_zero=False,
                       positions_from_first_real=False, mlp_input="contextual", relu_before=False,
                       value="X", softmax="stable", pad_rows_zero=False, relu_update=False,
                       positions_reversed=False, pad_fill=None, mask_inverted=False, combine="or", embed_scale=False,
                       update_from=None, messages_transposed=False):
    """Reference one-head attention LM (seed 003), float64. ``sd`` maps the contract's parameter names.

    The keyword arguments describe known mistakes (the diagnosis compares a submission with them);
    the defaults are the correct model.
    """
    g = {k: v.double() for k, v in sd.items()}
    B, T = ids.shape
    rows = g["position_embedding.weight"]
    rows = rows[rows.shape[0] - T:] if positions_from_end else rows[:T]          # slots 0..T-1, or the last T
    rows = rows.flip(0) if positions_reversed else rows      # the mistake: slot t gets row T-1-t
    tokens = g["token_embedding.weight"][ids]                                           # (B, T, d)
    if embed_scale:                      # the mistake: token rows times sqrt(d_model), as the Transformer paper's
        tokens = tokens * math.sqrt(tokens.shape[-1])
    if positions_from_first_real:       # the mistake: each window counts from its first real token (pads at 0)
        slot = (ids.ne(pad_id).long().cumsum(-1) - 1).clamp(min=0)                      # (B, T)
        X = tokens + positions * rows[slot]                                             # (B, T, d)
    else:
        X = tokens + positions * rows[None]                                             # (B, T, d)
    Q = X @ g[f"W_{'K' if key == 'query_from_W_K' else 'Q'}.weight"].T    # (B, T, d_k); the mistake: W_K's queries
    K = X @ g[f"W_{'Q' if key == 'query' else 'K'}.weight"].T              # (B, T, d_k); the mistake: W_Q's keys
    V = (tokens if value == "tokens" else X) @ g["W_V.weight"].T     # (B, T, d_v); the mistake: token rows only
    d_k = g["W_K.weight"].shape[0]
    divisor = {"d_k": math.sqrt(d_k), "d_model": math.sqrt(X.shape[-1]), "none": 1.0, "d_k_unrooted": d_k,
               "d_v": math.sqrt(g["W_V.weight"].shape[0]), "T": math.sqrt(T), "fixed48": math.sqrt(48),
               "d_k_halved": d_k / 2, "d_k_twice": 2 * d_k}[scale]     # the mistakes: `d_k ** 1/2` read by Python
    scores = (K @ Q.transpose(-2, -1) if key == "transposed" else Q @ K.transpose(-2, -1)) / divisor  # (B, T, T)
    real = ids.ne(pad_id)                                                               # (B, T)
    blocked = torch.zeros(B, T, T, dtype=torch.bool)
    padded_keys = (~real[:, None, :]) & real[:, :, None]          # (B, T, T) a real query's padded keys
    if future:       # the future (j > i); the mistakes: the past (j < i), or the future and the diagonal (j >= i)
        allowed = {"future": causal_mask(T), "past": causal_mask(T).T, "diagonal": causal_mask(T).tril(-1),
                   "next": torch.ones(T, T, dtype=torch.bool).tril(1), "self": torch.eye(T, dtype=torch.bool),
                   "strict_future": ~causal_mask(T),       # the mistake: the allowed triangle used as the blocked one
                   "before_own": causal_mask(T).tril(-1)}[triangle]   # (forward's) keys K[:, :-1]: not its own
        blocked |= ~allowed[None]
    if combine == "and":                 # the mistake: the causal and padding masks joined with &, not |
        blocked = blocked & padded_keys
    elif pad_mask == "real_queries":
        blocked |= padded_keys
    elif pad_mask == "all_queries":
        blocked |= (~real[:, None, :]).expand(B, T, T)
    elif pad_mask == "query_rows":      # the mistake: the padded queries' rows masked, not the padded keys' columns
        blocked |= (~real[:, :, None]).expand(B, T, T)
    elif pad_mask == "batch_as_query":  # the mistake: pad[None] & real[..., None], the batch axis read as the query
        blocked = blocked | ((~real)[None] & real[..., None])      # axis: raises unless B == T, as the student's does
    if mask_inverted:                    # the mistake: -inf where allowed, the blocked scores kept (where's branches
        blocked = ~blocked               # swapped, or the mask's test inverted)
    if after_softmax:                    # the mistake: softmax over every key, masked weights zeroed afterwards
        masked = scores
        weights = torch.softmax(scores, dim=axis).masked_fill(blocked, 0.0)
    else:
        masked = scores.masked_fill(blocked, fill)
        if pad_fill is not None:         # the mistake: the padded keys filled with another value than the future
            masked = masked.masked_fill(padded_keys & blocked, pad_fill)
        weights = torch.softmax(masked, dim=axis)                                       # (B, T, T)
    if softmax == "unstable":            # the mistake: exp(s) / sum exp(s) without the max, in float32 as a student's
        e = torch.exp(masked.float())    # runs: inf past 88.7, and inf / inf is NaN
        weights = (e / e.sum(dim=axis, keepdim=True)).double()
    if softmax == "one_query_axis":      # the mistake (forward's): a softmax over the size-1 axis of its one query,
        weights = (masked - masked).exp()  # exp(s - s): 1 at every key, NaN where s is -inf
    if triangle == "before_own":         # keys K[:, :-1]: the first query has none, and an empty softmax reads 0
        weights = torch.cat([torch.zeros_like(weights[:, :1]), weights[:, 1:]], dim=1)
    if nan_zero:                         # the mistake: rows with nothing allowed papered over with nan_to_num
        weights = weights.nan_to_num(0.0)
    if pad_rows_zero:                    # the mistake: the padded queries' rows zeroed after the softmax
        weights = weights * real[:, :, None]
    # the mistake: weights^T V, each position's values mixed by its column of weights (the queries reading it)
    messages = (weights.transpose(-2, -1) if messages_transposed else weights) @ V      # (B, T, d_v)
    updates = messages @ g["W_O.weight"].T                                              # (B, T, d)
    added = torch.relu(updates) if relu_update else updates              # the mistake: a ReLU on the update
    if update_from is not None:          # the mistake (forward's): the update of another slot's query (X[:, :1])
        added = added[:, update_from:update_from + 1].expand_as(added)
    kept = {True: X, False: 0.0, "tokens": tokens, "first_slot": X[:, :1], "detached": X.detach()}[residual]
    contextual = kept + added          # the mistakes: no X, token rows only, the first slot's row, X cut from the graph
    fed = {"contextual": contextual, "updates": updates, "X": X}[mlp_input]   # the mistakes: it reads the updates, or X
    fed = torch.relu(fed) if relu_before else fed                         # the mistake: ReLU before the layer
    hidden = fed @ g["hidden_layer.weight"].T + g["hidden_layer.bias"]
    if relu == "gelu":                   # the mistake: GELU where the task asks for ReLU
        hidden = torch.nn.functional.gelu(hidden)
    elif relu and not relu_before:
        hidden = torch.relu(hidden)
    logits_all = hidden @ g["vocab_head.weight"].T + g["vocab_head.bias"]               # (B, T, V)
    return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked, weights=weights,
                messages=messages, updates=updates, contextual=contextual, hidden=hidden,
                logits_all=logits_all, logits=logits_all[:, readout, :])
