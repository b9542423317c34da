"""A small grammar of single slips in a `TeachingAttentionLM`, applied to the judge's float64 reference, for naming by
reproduction (as autograder/causal_head/grammar.py does for the head).

Each slot of the attention (the scale's source, the causal triangle and its offset, the padding mask, the fill,
where the mask is applied, the softmax's axis, the operands of the scores, NaN rows papered over) has a few values,
the reference's keyword arguments; every single edit, then every pair on different slots, is computed on the
judge's padded and unpadded windows (each only as far as it still fits), and a submission is named by the edit whose weights and logits
reproduce its own on both. What is shown is the kit's fixed text: no student text.
"""
from __future__ import annotations

import itertools

from attnkit.toolkit.evidence import arrays, same

from . import reference
from .evidence import close
from .plan import PAD, state_dict

# (slot, reference keyword, value, id, sentence)
SINGLES = [
    ("scale", "scale", "d_model", "scaled_by_model_width", "your scores are divided by sqrt(d_model) instead of "
                                                            "sqrt(d_k)"),
    ("scale", "scale", "none", "no_scaling", "your scores are not divided by sqrt(d_k)"),
    ("scale", "scale", "d_k_unrooted", "divided_by_d_k", "your scores are divided by d_k instead of sqrt(d_k)"),
    ("scale", "scale", "d_v", "scaled_by_value_width", "your scores are divided by sqrt(d_v), the width of the values, "
                                                       "instead of sqrt(d_k): the scale is read from the wrong "
                                                       "dimension"),
    ("scale", "scale", "T", "scaled_by_window_length", "your scores are divided by sqrt(T), the window's length, "
                                                       "instead of sqrt(d_k): the scale is read from the wrong "
                                                       "dimension"),
    ("future", "triangle", "past", "lm_future_triangle", "your causal mask hides the past and keeps the future"),
    ("future", "triangle", "diagonal", "lm_diagonal_masked", "your causal mask also hides each token from itself"),
    ("future", "triangle", "next", "future_mask_offset_plus_1", "your causal mask lets each query also read the next "
                                                                "key: it looks like torch.triu(..., diagonal=2) for "
                                                                "the masked part"),
    ("future", "future", False, "future_mask_missing_in_details", "your weights have no causal mask, only padding"),
    ("pad", "pad_mask", "none", "no_padding_mask", "real queries are not kept from padded keys"),
    ("pad", "pad_mask", "all_queries", "padding_mask_nan_rows", "padded keys are masked for every query, padded "
                                                                "queries included"),
    ("fill", "fill", 0.0, "lm_mask_filled_with_zero", "your masked scores are 0 instead of -inf"),
    ("fill", "after_softmax", True, "lm_mask_after_softmax", "the mask is applied after the softmax"),
    ("axis", "axis", -2, "softmax_over_queries", "the softmax runs over the query axis"),
    ("key", "key", "query", "lm_key_from_query", "your keys come from W_Q"),
    ("pad", "pad_mask", "query_rows", "padding_mask_on_query_rows", "the padding mask hides the padded queries' "
                                                                    "rows instead of the padded keys' columns"),
    ("positions", "positions_from_first_real", True, "positions_from_first_real_token",
     "position rows are counted from each window's first real token instead of slot 0, so a left-padded window "
     "gets other rows than the reference"),
    ("positions", "positions", False, "lm_no_position_rows", "no position rows are added to the token embeddings"),
    ("nan", "nan_zero", True, "nan_rows_zeroed", "rows with no allowed key are turned from NaN into zeros (nan_to_num), "
                                                 "so their weights sum to 0"),
]


# slips after the attention: the weights stay right, only the logits move
AFTER = [
    ("mlp", "mlp_input", "updates", "mlp_reads_updates", "the hidden layer reads the attention's updates instead of "
                                                         "the residual sum X + updates"),
    ("mlp", "relu_before", True, "relu_before_hidden_layer", "the ReLU is applied before the hidden layer instead of "
                                                             "after it"),
    ("mlp", "residual", False, "lm_no_residual", "the updates are not added to X (no residual)"),
    ("mlp", "relu", False, "lm_no_relu", "the hidden layer has no ReLU"),
]


def edits():
    return [(s,) for s in SINGLES] + [(a, b) for a, b in itertools.combinations(SINGLES + AFTER, 2) if a[0] != b[0]]


def ident(edit) -> str:
    return "+".join(e[3] for e in edit)


HOW = ("; the judge reproduced your weights and outputs"
       " by making this change to a correct model, on its own windows")


def sentence(edit) -> str:
    return _sentence(edit) + HOW


def _sentence(edit) -> str:
    return "; and ".join(e[4] for e in edit)


def reproduce(results, plan) -> list:
    """The edits whose weights and logits reproduce the submission's on both windows, singles before pairs, each
    computed only as far as it still fits; an edit that changes nothing on these windows is never named."""
    got = {run: arrays(results, run) for run in ("padded", "unpadded")}
    if any("d_weights" not in g or "d_logits" not in g for g in got.values()):
        return []
    sd, t = state_dict(plan, "w"), plan["tensors"]
    ref_out = {run: reference.lm_forward_details(t[run], sd, PAD) for run in got}        # the correct model, once
    correct = {run: ref_out[run]["weights"] for run in got}
    right_weights = all(same(got[r]["d_weights"], correct[r]) for r in got)
    found = []
    # right weights: a slip after the attention, if one of AFTER's; else one of the attention's (and its pairs)
    for edit in ([(s,) for s in AFTER] if right_weights else edits()):
        if found and len(edit) > len(found[0]):
            break
        kw = {e[1]: e[2] for e in edit}
        outs = {}
        for r in got:
            outs[r] = reference.lm_forward_details(t[r], sd, PAD, **kw)
            if not (same(got[r]["d_weights"], outs[r]["weights"]) and close(got[r]["d_logits"], outs[r]["logits"])
                    and ("d_contextual" not in got[r] or close(got[r]["d_contextual"], outs[r]["contextual"]))):
                break                # the returned residual sum too: a missing residual and an MLP fed the updates
                                     # give the same logits
        else:
            if not all(same(outs[r]["weights"], correct[r]) for r in got) or (right_weights and not all(
                    close(outs[r]["logits"], ref_out[r]["logits"]) for r in got)):
                found.append(edit)
    if len(found) > 1:           # the same numbers at full length (d_v and T may be equal there): shorter windows
        found = [e for e in found if _fits_shorter(results, t, sd, {x[1]: x[2] for x in e})] or found
    return found


def _fits_shorter(results, t, sd, kw) -> bool:
    """The edit reproduces the submission's weights on every shorter window it ran on too."""
    from .plan import length_runs
    for name, _ in length_runs():
        got = arrays(results, name)
        if "d_weights" in got and not same(got["d_weights"], reference.lm_forward_details(t[name], sd, PAD, **kw)["weights"]):
            return False
    return True


MEASURED = "; the judge measured this on its own runs of your code"
B1_CALL = 6            # plan.STATE_CALLS: "a batch of one"


def observed(results, plan) -> list:
    """Slips reproduced by what the runs show directly: a returned tensor that is another of the reference's (X
    edited in place into the contextual rows, the scores masked in place, the logits of the last batch element), a
    forward whose size-1 axes are dropped, a position table with padding_idx, a tensor made on the CPU. (id, sentence)
    pairs, each only when what it says was measured."""
    from attnkit.toolkit.evidence import meta
    sd, t, found = state_dict(plan, "w"), plan["tensors"], []
    got = arrays(results, "unpadded")
    ref = reference.lm_forward_details(t["unpadded"], sd, PAD)
    right = "d_weights" in got and same(got["d_weights"], ref["weights"]) and close(got.get("d_logits_all"),
                                                                                    ref["logits_all"])
    if right and same(got.get("d_X"), ref["contextual"]) and not same(ref["X"], ref["contextual"]):
        found.append(("returned_X_is_contextual", "forward_details returns the contextual rows under 'X': the update "
                                                  "was added to X in place (X += ...), so the embeddings are lost"))
    if right and same(got.get("d_scores"), ref["masked_scores"]) and not same(ref["scores"], ref["masked_scores"]):
        found.append(("scores_returned_masked", "forward_details returns the masked scores under 'scores': the "
                                                "scores were masked in place"))
    if "d_logits_all" in got and close(got.get("d_logits"), ref["logits_all"][-1]):
        found.append(("logits_last_batch_element", "forward_details()['logits'] is logits_all[-1], the last window "
                                                   "of the batch, instead of logits_all[:, -1], each window's last "
                                                   "position"))
    fwd = got.get("forward")
    if right and fwd is not None and not close(fwd, ref["logits"]):      # forward_details right, forward not
        if fwd.shape == (ref["logits"].shape[0], 1, ref["logits"].shape[1]) and close(fwd[:, 0], ref["logits"]):
            found.append(("forward_keeps_query_axis", "forward returns shape (B, 1, vocab) instead of (B, vocab): "
                                                      "the axis of the one query is kept (forward_details is right)"))
        for scale, what in (("none", "does not divide the scores by sqrt(d_k)"),
                            ("d_model", "divides the scores by sqrt(d_model) instead of sqrt(d_k)"),
                            ("d_k_unrooted", "divides the scores by d_k instead of sqrt(d_k)")):
            if close(fwd, reference.lm_forward_details(t["unpadded"], sd, PAD, scale=scale)["logits"]):
                found.append((f"forward_scale_{scale}", f"forward {what}, while forward_details scales right"))
    b1 = arrays(results, "state").get(f"c{B1_CALL}_forward")
    ref1 = reference.lm_forward_details(t["b1"], sd, PAD)["logits"]
    if b1 is not None and b1.dim() < 2 and close(b1, ref1.squeeze(0)):
        found.append(("output_squeezed", "forward's output loses its size-1 axes: with a batch of one it has shape "
                                          f"{tuple(b1.shape)} instead of {tuple(ref1.shape)} (a bare .squeeze())"))
    if meta(results, "inspect").get("position_padding_idx") is not None:
        found.append(("position_padding_idx", "the position table is built with padding_idx, so position row 0 starts "
                                              "at zero and never learns"))
    from .evidence import _agrees
    from .plan import length_runs
    from .plan import STATE_CALLS
    calls = arrays(results, "state")
    # and on one instance called as a notebook does, at every length it is called with: no state kept (a mask
    # cached at the first call's length also comes from the CPU, but the length is its mistake, not the device)
    everywhere = right and all(_agrees(arrays(results, n), t[n], sd) for n, _ in length_runs()) and all(
        same(calls.get(f"c{i}_d_weights"), reference.lm_forward_details(t[name], sd, PAD)["weights"])
        for i, (_, name, mode) in enumerate(STATE_CALLS) if mode == "eval" and name in t)
    if everywhere and meta(results, "meta").get("device_mismatch"):     # right at every length: the device alone
        found.append(("tensor_made_on_cpu_in_forward", "a tensor forward_details or forward uses is made on the CPU "
                                                       "(built without device=ids.device, or kept from an earlier "
                                                       "call in a plain attribute) and does not move with the model "
                                                       "to another device"))
    return [(i, text + MEASURED) for i, text in found]
