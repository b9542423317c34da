"""Facts about a submitted `TeachingAttentionLM`, measured from its own arrays, for the diagnosis catalogue."""
import torch

from . import reference
from attnkit.toolkit.evidence import arrays, as_json_matrix, fused_in_source, meta, same, watched_ops
from .plan import DEFAULTS, OTHER_PAD, PAD, SEED_SIZES, T, length_runs, state_dict

WEIGHT_MISTAKES = {"no_padding_mask": {"pad_mask": "none"}, "padding_mask_nan_rows": {"pad_mask": "all_queries"},
                   "future_mask_missing_in_details": {"future": False}, "scaled_by_model_width": {"scale": "d_model"},
                   "no_scaling": {"scale": "none"}, "softmax_over_queries": {"axis": -2},
                   "lm_mask_after_softmax": {"after_softmax": True}, "divided_by_d_k": {"scale": "d_k_unrooted"},
                   "lm_mask_filled_with_zero": {"fill": 0.0}, "lm_future_triangle": {"triangle": "past"},
                   "lm_diagonal_masked": {"triangle": "diagonal"}, "lm_key_from_query": {"key": "query"}}


def reference_grads(plan, **edit) -> dict:
    """The gradients of the grad runs' loss (cross-entropy of forward() on the padded windows) for every parameter of
    the judge's float64 reference, given the judge's weights, with ``edit`` (the reference's keyword arguments)."""
    import torch.nn.functional as F
    sd = {k: v.detach().double().requires_grad_() for k, v in state_dict(plan, "w").items()}
    logits = reference.lm_forward_details(plan["tensors"]["padded"], sd, PAD, **edit)["logits"]        # (B, V)
    F.cross_entropy(logits, plan["tensors"]["targets"]).backward()
    sd["token_embedding.weight"].grad[PAD] = 0.0           # the contract's padding_idx row never gets a gradient
    return {n: p.grad for n, p in sd.items() if p.grad is not None}


def _off(got: dict, want: dict) -> list[str]:
    """The parameters whose gradient in ``got`` (a grad run's arrays) differs from ``want``'s beyond float32 rounding,
    which is measured against the largest gradient of any parameter: a small gradient (W_K's, 0.2 beside the head's
    10) sums terms of the large ones' size, and a correct float32 model's differed from float64 by 2e-5 there."""
    scale = max((g.abs().max().item() for g in want.values()), default=1.0)
    return [n for n, g in want.items() if f"grad:{n}" in got and not (
        got[f"grad:{n}"].shape == g.shape and torch.allclose(got[f"grad:{n}"].double(), g, atol=1e-4 * scale,
                                                             rtol=1e-3))]


def grads_off(results, plan, **edit) -> list[str]:
    """The parameters whose gradient in the eval-mode grad run differs from the reference's (with ``edit``); the
    ones the run did not give a gradient are test_finite_gradients' (an empty list when the run failed)."""
    got = arrays(results, "grad_eval")
    return _off(got, reference_grads(plan, **edit)) if got else []


def _mask_only_while_training(results, plan) -> bool:
    """forward()'s gradients are a correct model's in train mode and a model's without the padding mask in eval mode
    (blind set 11, m29: the padding mask applied only `if self.training`; a forward that masks in both modes is
    not this slip, whatever forward_details does)."""
    def fit(run, want):
        got = arrays(results, run)
        return bool(got) and all(f"grad:{n}" in got for n in want) and not _off(got, want)
    right, unmasked = reference_grads(plan), reference_grads(plan, pad_mask="none")
    return fit("grad", right) and fit("grad_eval", unmasked) and not fit("grad", unmasked)


def default_shape_errors(shapes: dict) -> list[str]:
    """The contract's parameters whose shape at the seed's sizes, every other argument defaulted, is wrong."""
    Vs, Ts, d = SEED_SIZES["vocab_size"], SEED_SIZES["context_len"], DEFAULTS
    want = {"token_embedding.weight": [Vs, d["d_model"]], "position_embedding.weight": [Ts, d["d_model"]],
            "W_Q.weight": [d["d_k"], d["d_model"]], "W_K.weight": [d["d_k"], d["d_model"]],
            "W_V.weight": [d["d_v"], d["d_model"]], "W_O.weight": [d["d_model"], d["d_v"]],
            "hidden_layer.weight": [d["hidden"], d["d_model"]], "vocab_head.weight": [Vs, d["hidden"]]}
    return [f"{k} of shape {tuple(shapes[k])} (expected {tuple(v)})" for k, v in want.items()
            if k in shapes and list(shapes[k]) != v]


def close(got, ref, atol=1e-5, rtol=1e-4):
    """Equal up to float32 rounding: the absolute slack grows with the tensor's own scale (logits reach ~100
    with the judge's weights, and a correct float32 model then differs from float64 by ~1e-5)."""
    if got is None or got.shape != ref.shape:
        return False
    finite = ref[torch.isfinite(ref)]
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    return torch.allclose(got.double(), ref.double(), atol=atol * scale, rtol=rtol)


def _free_rows(w, future) -> bool:
    """Rows a padded query may have (the release: finite, each a distribution, and as every row no weight on the
    future: a padded query attends to itself or to the padded keys before it). w, future: (n, T)."""
    return bool(w.isfinite().all()) and bool(((w.sum(-1) - 1).abs() <= 1e-4).all()) and \
        bool((w[future].abs() <= 1e-6).all())


def weights_fit(got, ref, real) -> bool:
    """The weights are the reference's on the real queries' rows; a padded query's rows are free while they are
    what the release allows (blind set 8's m35 let a padded query read only itself), so they must match only where
    the reference's are not (a NaN row, a row that sums to 0, weight on the future is the mistake's picture).

    got, ref: (B, T, T) weights; real: (B, T) bool, the real queries."""
    if got is None or got.shape != ref.shape:
        return False
    if not same(got[real], ref[real]):
        return False
    future = (~reference.causal_mask(got.shape[-1])).expand_as(got)[~real]         # (n_padded, T)
    pad_got, pad_ref = got[~real], ref[~real]                                        # (n_padded, T)
    return _free_rows(pad_got, future) if _free_rows(pad_ref, future) else same(pad_got, pad_ref)


def _agrees(got, ids, sd):
    """The run's weights (real query rows) and logits equal a correct model's."""
    if "d_weights" not in got or "d_logits" not in got:
        return False
    ref, real = reference.lm_forward_details(ids, sd, PAD), ids.ne(PAD)
    return got["d_weights"].shape == ref["weights"].shape and close(got["d_weights"][real], ref["weights"][real]) \
        and close(got["d_logits"], ref["logits"])


def _length_facts(results, plan, sd):
    """Right on full windows, wrong or failing on shorter ones; and whether positions were counted from the end."""
    t, ev = plan["tensors"], {}
    full_ok = all(_agrees(arrays(results, n), t[n], sd) for n in ("padded", "unpadded"))
    short = [(n, L) for n, L in length_runs() if L < T]
    ev["full_length_only"] = full_ok and any(not _agrees(arrays(results, n), t[n], sd) for n, _ in short)
    ev["positions_from_end"] = full_ok and all(
        same(arrays(results, n).get("d_X"), reference.lm_forward_details(t[n], sd, PAD, positions_from_end=True)["X"])
        for n, _ in short)
    return ev


def _random_in_eval(results) -> bool:
    """The same windows twice give different results in eval mode and in train mode (the `state` run's calls 3, 4
    and 5, 6; plan.STATE_CALLS), and the first call changed no buffer or parameter (state is not randomness)."""
    got, m = arrays(results, "state"), meta(results, "state")
    keys = ("d_weights", "d_contextual", "forward")
    if not all(f"c{i}_{k}" in got for i in (3, 4, 5, 6) for k in keys) or m.get("changed_by_first_call"):
        return False
    differ = lambda i, j: any(not torch.equal(got[f"c{i}_{k}"].nan_to_num(), got[f"c{j}_{k}"].nan_to_num())  # noqa: E731
                              for k in keys)
    return differ(3, 4) and differ(5, 6)


def _hides_padding(weights, ids) -> bool:
    """Every real token's query gives (about) no weight to a padded key: weights (B, T, T), ids (B, T)."""
    try:
        pad = ids == PAD                                                      # (B, T)
        read = weights.double().nan_to_num(1.0)[~pad] * pad.repeat_interleave((~pad).sum(1), dim=0)  # (real, T)
        return bool(read.abs().max() < 1e-6)
    except (RuntimeError, IndexError):                                        # weights of another shape
        return False


def gather(results, plan) -> dict:
    sd, t = state_dict(plan, "w"), plan["tensors"]
    ev = {"weights_match": []}
    fits = {name: [] for name in WEIGHT_MISTAKES}        # name -> (fits the run, shows on it) for each run
    for run in ("padded", "unpadded"):
        got = arrays(results, run)
        if "d_weights" not in got:
            continue
        ids = t[run]
        real = ids.ne(PAD)
        correct = reference.lm_forward_details(ids, sd, PAD)["weights"]
        for name, kw in WEIGHT_MISTAKES.items():
            wrong = reference.lm_forward_details(ids, sd, PAD, **kw)["weights"]
            fits[name].append((weights_fit(got["d_weights"], wrong, real), not weights_fit(wrong, correct, real)))
        if run == "unpadded":
            ref = reference.lm_forward_details(ids, sd, PAD)
            no_future = reference.lm_forward_details(ids, sd, PAD, future=False)
            ev["returned_weights_without_causal_mask"] = same(got["d_weights"], no_future["weights"]) and \
                same(got["d_contextual"], ref["contextual"])
            ev["messages_without_causal_mask"] = same(got["d_weights"], ref["weights"]) and \
                same(got["d_contextual"], no_future["contextual"])
            ev["forward_reads_first_position"] = close(got["forward"], ref["logits_all"][:, 0]) and \
                not close(got["forward"], ref["logits"])
            ev["returns_probabilities"] = same(got["forward"], ref["logits"].softmax(-1)) and \
                same(got["d_logits_all"], ref["logits_all"].softmax(-1))
            ev["weights_correct"] = same(got["d_weights"], ref["weights"]) and close(got["forward"], ref["logits"])
            ev["no_residual"] = same(got["d_contextual"], reference.lm_forward_details(ids, sd, PAD, residual=False)["contextual"])
            ev["no_position_rows"] = same(got["d_X"], reference.lm_forward_details(ids, sd, PAD, positions=False)["X"])
            row0 = sd["token_embedding.weight"].double()[ids] + sd["position_embedding.weight"].double()[0]
            ev["one_position_row"] = same(got["d_X"], row0) and not same(row0, ref["X"])
            ev["first_position"] = same(got["d_logits"], reference.lm_forward_details(ids, sd, PAD, readout=0)["logits"])
            # an MLP that reads X leaves W_O (and the whole attention) without a gradient too
            ev["mlp_reads_X"] = same(got["d_hidden"], reference.lm_forward_details(ids, sd, PAD, mlp_input="X")["hidden"])
            ev["no_relu"] = same(got["d_hidden"], reference.lm_forward_details(ids, sd, PAD, relu=False)["hidden"])
        else:
            correct = reference.lm_forward_details(ids, sd, PAD)["logits"]
            leaky = reference.lm_forward_details(ids, sd, PAD, pad_mask="none")["logits"]
            # forward alone: forward_details must hide the padded keys from real queries, or the slip is not forward's
            ev["forward_ignores_padding"] = same(got["forward"], leaky) and not same(got["forward"], correct) \
                and _hides_padding(got["d_weights"], ids)

    # a mistake whose weights the submission has on every run (a padded query's free rows aside), shown on one at
    # least: blind set 9's masks joined with & matched "no causal mask" on the unpadded run, where padding cannot
    # show, and contradicted it on the padded one
    ev["weights_match"] = [n for n, seen in fits.items()
                           if seen and all(fit for fit, _ in seen) and any(shows for _, shows in seen)]
    grad = results.results.get("grad")
    if grad and not grad[0].get("error"):
        ev["no_gradient_anywhere"] = not grad[1]
        listed = meta(results, "grad").get("parameters", [])
        ev["qk_without_gradient"] = all(n in listed and f"grad:{n}" not in grad[1] for n in ("W_Q.weight", "W_K.weight"))
    ev.update(_length_facts(results, plan, sd))
    ev["padding_mask_only_in_training"] = "no_padding_mask" in ev["weights_match"] and _mask_only_while_training(
        results, plan)
    ev["random_in_eval"] = _random_in_eval(results)
    got, ids, sdp = arrays(results, "other_pad_id").get("d_weights"), t["other_pad"], state_dict(plan, "wp")
    as_zero = reference.lm_forward_details(ids, sdp, PAD)["weights"]            # the mask built from id 0
    ev["pad_id_hard_coded"] = same(got, as_zero) and not same(as_zero, reference.lm_forward_details(ids, sdp, OTHER_PAD)["weights"])
    inspect = meta(results, "inspect")
    ev["wrong_defaults"] = bool(default_shape_errors(inspect.get("seed_size_shapes") or {})) or (
        bool(inspect) and (inspect.get("default_pad_id") not in (None, DEFAULTS["pad_id"])
                           or inspect.get("default_padding_idx") != DEFAULTS["pad_id"]))
    ev["no_padding_idx"] = bool(inspect) and inspect.get("padding_idx") is None
    ev["biased_attention_projection"] = any(f"{n}.bias" in inspect.get("parameters", {})
                                            for n in ("W_Q", "W_K", "W_V", "W_O"))
    # unused alone is not this slip: an MLP that reads X leaves W_O without a gradient too
    ev["W_O_unused"] = "W_O.weight" in inspect.get("seed_size_unused", []) and not ev.get("mlp_reads_X")
    ev["uses_fused_attention"] = bool(watched_ops(results)[0] or fused_in_source(results)
                                      or "MultiheadAttention" in inspect.get("modules", []))
    return ev


def attention_pattern(results, plan) -> dict:
    """The student's weights on a left-padded window (4 pads, 2 real tokens), beside a correct model's."""
    ids = plan["tensors"]["padded"]
    expected = reference.lm_forward_details(ids, state_dict(plan, "w"), PAD)["weights"]
    got = arrays(results, "padded").get("d_weights")
    ok = got is not None and tuple(got.shape) == tuple(expected.shape)
    return {"caption": "forward_details()['weights'] on a window with 4 padding slots then 2 real tokens "
                       "(rows = queries, columns = keys)",
            "student": as_json_matrix(got[1]) if ok else None, "expected": as_json_matrix(expected[1])}
