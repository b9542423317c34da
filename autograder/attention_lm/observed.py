"""What the runs of a `TeachingAttentionLM` show directly, named only when measured (the grammar's complement:
autograder/attention_lm/grammar.py reproduces numbers by edits of the reference; these are facts no edit of it
computes: a returned tensor that aliases another, an output of the wrong shape, state kept across calls)."""
import torch

from attnkit.toolkit.evidence import arrays, meta, same

from . import reference
from .evidence import close, grads_off, weights_fit
from .plan import PAD, SHAPES, STATE_CALLS, state_dict

MEASURED = "; the judge measured this on its own runs of your code"
# the state run's call on a batch of one, found by its input (CI: a call added before it once left a stale 6 here)
B1_CALL = next(i for i, (_, ids, _) in enumerate(STATE_CALLS) if ids == "b1")


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
    masked = got.get("d_masked_scores")
    allowed = ref["masked_scores"].isfinite()                                  # (B, T, T) the keys a query may read
    if masked is not None and masked.shape == allowed.shape and (~allowed).any() and bool(
            masked[allowed].isnan().all()) and bool((masked[~allowed] == float("-inf")).all()):
        # blind sets 10, 12 and 14 (and 13's head): `mask.float() * -inf`, 0 * -inf being NaN; every key blocked
        # would give -inf everywhere, not NaN where the key is allowed
        found.append(("additive_mask_nan", "your masked scores are NaN at every allowed key and -inf at every "
                                           "blocked one, so every weight is NaN: an additive mask made by multiplying "
                                           "the 0/1 mask by -inf gives 0 * -inf = NaN where it should add 0; build it "
                                           "with masked_fill, or torch.where(mask, -inf, 0.0)"))
    ids = t["padded"]
    tokens, rows = sd["token_embedding.weight"].double()[ids], sd["position_embedding.weight"].double()[:ids.shape[1]]
    unplaced = tokens + rows * ids.ne(PAD)[..., None]                          # (B, T, d) no position row at a pad slot
    if close(arrays(results, "padded").get("d_X"), unplaced) and not close(unplaced, tokens + rows):   # set 13's m15
        found.append(("pad_slots_without_position_rows", "X has no position row at the padding slots (the position "
                                                         "rows multiplied by the real-token mask): slot t gets "
                                                         "position row t whatever its token, padding included"))
    if "d_logits_all" in got and close(got.get("d_logits"), ref["logits_all"][-1]):
        found.append(("logits_last_batch_element", "forward_details()['logits'] is logits_all[-1], the last window "
                                                   "of the batch, instead of logits_all[:, -1], each window's last "
                                                   "position"))
    for how, made in (("the mean over positions of logits_all", ref["logits_all"].mean(1)),
                      ("logits_all[:, 0], the first slot's", ref["logits_all"][:, 0])):
        if right and close(got.get("d_logits"), made) and not close(made, ref["logits"]):
            found.append(("details_logits_not_last_position", f"forward_details()['logits'] is {how}, instead of "
                                                               "logits_all[:, -1], each window's last position "
                                                               "(logits_all itself is right)"))
    fwd = got.get("forward")
    if right and fwd is not None and not close(fwd, ref["logits"]):      # forward_details right, forward not
        if fwd.shape == (ref["logits"].shape[0], 1, ref["logits"].shape[1]) and close(fwd[:, 0], ref["logits"]):
            found.append(("forward_keeps_query_axis", "forward returns shape (B, 1, vocab) instead of (B, vocab): "
                                                      "the axis of the one query is kept (forward_details is right)"))
    if right and _query_broadcast(results, plan, sd):
        found.append(("forward_broadcast_over_batch", "forward's output has shape (B, B, vocab) instead of (B, "
                                                      "vocab), and its entry [b, b] is window b's correct logits: in "
                                                      "forward a tensor of shape (B, 1, ...) met one of shape (B, ...) "
                                                      "and broadcast every window against every other, as when the "
                                                      "last query loses its time axis (X[:, -1] where X[:, -1:] keeps "
                                                      "it) or the update keeps it (W_O(message) of shape (B, 1, "
                                                      "d_model) added to X[:, -1] without .squeeze(1)), or as when "
                                                      "the (B, T) padding mask meets the (B, 1, T) scores without "
                                                      "its query axis (mask[:, None, :] keeps each window's own)"))
    if fwd is not None and fwd.shape == ref["logits_all"].shape and close(fwd, ref["logits_all"]) and close(
            got.get("d_logits"), ref["logits"]):
        found.append(("forward_returns_every_position", "forward returns logits_all, shape (B, T, vocab), instead of "
                                                        "the last position's logits, shape (B, vocab)"))
    earlier = _same_output_for_other_windows(results, plan)
    if earlier:
        found.append(("forward_returns_earlier_result", "forward gave the permuted windows (the same last token, the "
                                                        "earlier tokens reordered) exactly the output it had given "
                                                        "the windows before them, where a correct model's differ: "
                                                        "what it computes from the earlier tokens (the keys and "
                                                        "values, or the whole result) is kept from an earlier call "
                                                        "and reused"))
    if _state_kept(results, plan, sd):
        found.append(("state_kept_from_first_call", "a fresh model is right at every window length, but one model "
                                                    "called first at full length and then at a shorter one raised or "
                                                    "differed there: something built during the first call (a mask "
                                                    "sized for its length, say) is kept and reused"))
    if right and fwd is not None and close(fwd, ref["logits"]) and _embeddings_cut(results):
        found.append(("embeddings_cut_from_graph", "no gradient reaches token_embedding or position_embedding while "
                                                   "the other parameters get theirs: forward builds X outside the "
                                                   "graph (under torch.no_grad() or with .detach())"))
    if right and fwd is not None and close(fwd, ref["logits"]) and grads_off(results, plan) and not grads_off(
            results, plan, residual="detached"):        # blind set 10: every gradient a residual of X.detach() gives
        found.append(("residual_detached", "forward's values are right, but the gradients of the embeddings are "
                                           "not: the residual adds X cut from the graph (X.detach(), X.data), so the "
                                           "token and position rows learn only through the attention's queries, "
                                           "keys and values"))
    found += _width_slips(results)
    b1 = arrays(results, "state").get(f"c{B1_CALL}_forward")
    ref1 = reference.lm_forward_details(t["b1"], sd, PAD)["logits"]
    if b1 is not None and b1.dim() < 2 and close(b1, ref1.squeeze(0)):
        found.append(("output_squeezed", "forward's output loses its size-1 axes: with a batch of one it has shape "
                                          f"{tuple(b1.shape)} instead of {tuple(ref1.shape)} (a bare .squeeze())"))
    inspect = meta(results, "inspect")
    for a, b in (inspect.get("shared") or [])[:1]:
        found.append(("layers_shared", f"self.{b} is self.{a}: two of the contract's layers are one module (self.{b} "
                                       f"= self.{a} in __init__), so they share one weight, the model has fewer "
                                       f"parameters than the contract's, and the judge finds no {b}.weight to load"))
    found += _extra_parameters(inspect.get("parameters") or {}, inspect.get("modules") or ())
    if inspect.get("position_padding_idx") is not None:
        found.append(("position_padding_idx", "the position table is built with padding_idx, so position row 0 starts "
                                              "at zero and never learns"))
    from .evidence import _agrees
    from .plan import length_runs
    from .plan import STATE_CALLS
    calls = arrays(results, "state")
    # and on one instance called as a notebook does, at every length it is called with: no state kept (a mask
    # cached at the first call's length also comes from the CPU, but the length is its mistake, not the device)
    everywhere = right and all(_agrees(arrays(results, n), t[n], sd) for n, _ in length_runs()) and all(
        weights_fit(calls.get(f"c{i}_d_weights"), reference.lm_forward_details(t[name], sd, PAD)["weights"],
                    t[name].ne(PAD))
        for i, (_, name, mode) in enumerate(STATE_CALLS) if mode == "eval" and name in t)
    # right at every length: the device alone (a result kept from an earlier call is that call's, not the device's)
    if everywhere and not earlier and meta(results, "meta").get("device_mismatch"):
        found.append(("tensor_made_on_cpu_in_forward", "a tensor forward_details or forward uses is made on the CPU "
                                                       "(built without device=ids.device, or kept from an earlier "
                                                       "call in a plain attribute) and does not move with the model "
                                                       "to another device: with the model moved, it met the moved "
                                                       "tensors" + (results.quote(meta(results, "meta").get(
                                                           "device_line")) or " in your code")))
    return [(i, text + MEASURED) for i, text in found]


def _query_broadcast(results, plan, sd) -> bool:
    """On every run of a batch of more than one window, forward's output is (B, B, vocab) and its diagonal is a
    correct model's logits (blind set 8's m16: a query X[:, -1] of shape (B, d) met K^T of shape (B, d, T); blind
    set 9's m18: an update of shape (B, 1, d) added to X[:, -1] of shape (B, d))."""
    from .plan import length_runs
    seen = False
    for name, _ in length_runs():
        fwd = arrays(results, name).get("forward")
        ref = reference.lm_forward_details(plan["tensors"][name], sd, PAD)["logits"]          # (B, V)
        n = ref.shape[0]
        if fwd is None or n < 2:
            continue
        if fwd.shape != (n, n, ref.shape[1]) or not close(fwd.diagonal(dim1=0, dim2=1).T, ref):    # (B, V)
            return False
        seen = True
    return seen


def _same_output_for_other_windows(results, plan) -> bool:
    """forward, given the permuted windows after the unpadded ones, returned bit for bit what it returned for those,
    while it was right on them and a correct model's outputs for the two differ."""
    got = arrays(results, "permuted")
    t, sd = plan["tensors"], state_dict(plan, "wf")
    a, b = (reference.lm_forward_details(t[k], sd, PAD)["logits"] for k in ("unpadded", "permuted"))
    return ("out0" in got and close(got["out0"], a) and got["out1"].shape == got["out0"].shape
            and torch.equal(got["out0"], got["out1"]) and not close(a, b))


def _state_kept(results, plan, sd) -> bool:
    """Right on a fresh model at every length, and on one instance called at several lengths the first call right
    and a later one at another length raising or differing."""
    from .evidence import _agrees
    from .plan import STATE_CALLS, T, length_runs
    t = plan["tensors"]
    if not all(_agrees(arrays(results, n), t[n], sd) for n, _ in length_runs()):
        return False
    entry = results.results.get("state")
    if not entry or entry[0].get("error"):
        return False
    errors, calls = (entry[0].get("meta") or {}).get("errors") or {}, entry[1]
    if "0" in errors or not same(calls.get("c0_d_weights"), reference.lm_forward_details(t["unpadded"], sd,
                                                                                         PAD)["weights"]):
        return False
    later = [(i, name) for i, (_, name, mode) in enumerate(STATE_CALLS)
             if mode == "eval" and name in t and t[name].shape[1] != T]
    def differs(i, ids):            # on the real query rows, as the fresh runs are compared (padded rows are free)
        got, real = calls.get(f"c{i}_d_weights"), ids.ne(PAD)
        ref = reference.lm_forward_details(ids, sd, PAD)["weights"]
        return got is None or got.shape != ref.shape or not same(got[real], ref[real])
    return any(str(i) in errors or differs(i, t[name]) for i, name in later)


def _embeddings_cut(results) -> bool:
    """The gradient run: neither embedding gets a gradient, and every attention and MLP parameter does."""
    got, listed = arrays(results, "grad"), meta(results, "grad").get("parameters", [])
    embeddings = ("token_embedding.weight", "position_embedding.weight")
    rest = [n for n in listed if n not in embeddings]
    return bool(rest) and all(n in listed and f"grad:{n}" not in got for n in embeddings) and all(
        f"grad:{n}" in got for n in rest)


def _failed_product(results):
    """(rows, inner, other rows, other columns) of the matrix product forward_details failed on with the padded
    windows, read from torch's own message (matched here, never shown), or None."""
    import re
    entry = results.results.get("padded")
    err = entry[0].get("error") if entry else None
    raw = err.get("raw", "") if isinstance(err, dict) and err.get("stage") == "forward_details" else ""
    m = re.fullmatch(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", raw or "")
    return tuple(map(int, m.groups())) if m else None


def _width_slips(results) -> list:
    """Slips a product of the wrong widths shows at the judge's sizes (d_k, d_v and d_model all differ), where the
    seed's (all 48) let them run: W_O's weight used untransposed, values of width d_k with W_V never used."""
    from .plan import B, D_K, D_MODEL, D_V, T
    product = _failed_product(results)
    if product is None or product[0] != B * T:
        return []
    if product[1:] == (D_V, D_MODEL, D_V):       # (B*T, d_v) @ (d_model, d_v): W_O.weight's own shape, no .T
        return [("W_O_weight_not_transposed", f"the messages are multiplied by W_O.weight, shape (d_model, d_v), "
                                              "without its transpose: at the judge's sizes (d_model = "
                                              f"{D_MODEL}, d_v = {D_V}) the product does not fit; W_O(messages) "
                                              "is messages @ W_O.weight.T")]
    if product[1:] == (D_K, D_V, D_MODEL) and "W_V.weight" in meta(results, "inspect").get("seed_size_unused", []):
        return [("values_not_from_W_V", f"your values have width d_k = {D_K} instead of d_v = {D_V}, and W_V is "
                                        "never used (no gradient reaches it at the seed's sizes): the values are "
                                        "made by W_K or W_Q instead of W_V, which only fits when d_k = d_v")]
    return []


def _extra_parameters(shapes: dict, modules=()) -> list:
    """Every parameter the contract lists, with its shape, and more beside them (blind set 7: a learned temperature):
    their count and shapes, not their names (the student's words)."""
    layers = {n.rpartition(".")[0] for n in SHAPES}     # a bias on one of them is the catalogue's (biased_query)
    extra = [tuple(v) for n, v in shapes.items() if n not in SHAPES and n.rpartition(".")[0] not in layers]
    if not extra or any(tuple(shapes.get(n, ())) != shape for n, shape in SHAPES.items()):
        return []
    numbers = sum(int(torch.tensor(s).prod()) if s else 1 for s in extra)
    shown = ", ".join("a scalar" if not s else f"shape {s}" for s in extra[:4])
    if "LayerNorm" in modules:          # blind set 9's m23: the module's own type says which layer they are
        return [("layer_norm_added", f"your model has an nn.LayerNorm the contract does not ask for: its weight and "
                                     f"bias are the {len(extra)} parameter tensors beside the contract's ({shown}), "
                                     "and the tensors computed from what it normalises (Q, K and V from X, say) are "
                                     "no longer the contract's")]
    return [("extra_parameters", f"your model has {len(extra)} parameter tensor{'s' * (len(extra) > 1)} beside the "
                                 f"ones the contract lists ({shown}: {numbers:,} more number{'s' * (numbers != 1)}): "
                                 "a learned scale, bias or layer the assignment does not ask for")]


def beside(results, plan) -> list:
    """Slips the shapes of forward's outputs, or forward_details' own arrays against each other, show whatever the
    numbers are: named beside the grammar's edit that reproduces the rest (blind set 12's m29: sqrt(d_model) and a
    bare .squeeze(); set 11's m25: no ReLU and logits_all[:, 0] as the logits). (id, sentence) pairs."""
    from .plan import V, length_runs
    found, shapes = [], []
    for name, _ in length_runs():
        fwd, n = arrays(results, name).get("forward"), plan["tensors"][name].shape[0]
        if fwd is not None:
            shapes.append((tuple(fwd.shape), n))
    ones = [s for s, n in shapes if n == 1]
    if ones and all(s == (V,) for s in ones) and all(s == (n, V) for s, n in shapes if n > 1) and len(ones) < len(
            shapes):
        found.append(("output_squeezed", f"forward's output loses its size-1 axes: with a batch of one it has shape "
                                         f"({V},) instead of (1, {V}), while larger batches keep theirs (a bare "
                                         ".squeeze())"))
    elif shapes and all(s == (n, 1, V) for s, n in shapes):
        found.append(("forward_keeps_query_axis", "forward returns shape (B, 1, vocab) instead of (B, vocab): the "
                                                  "axis of the one query is kept"))
    got = arrays(results, "unpadded")
    logits, every = got.get("d_logits"), got.get("d_logits_all")
    if logits is not None and every is not None and every.dim() == 3 and every.shape[1] > 1 and not close(
            logits, every[:, -1]):
        for how, made in (("logits_all[:, 0], the first slot's", every[:, 0]),
                          ("the mean over positions of logits_all", every.mean(1)),
                          ("logits_all[-1], the last window of the batch", every[-1])):
            if made.shape == logits.shape and close(logits, made):
                found.append(("details_logits_not_last_position", f"forward_details()['logits'] is {how}, "
                                                                   "instead of logits_all[:, -1], each window's "
                                                                   "last position"))
                break
    return [(i, text + MEASURED) for i, text in found]

