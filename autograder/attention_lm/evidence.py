"""Facts about a submitted `TeachingAttentionLM`, measured from its own arrays, for the diagnosis catalogue."""
from .. import reference
from ..causal_head.evidence import fused_in_source, watched_ops
from ..evidence import arrays, as_json_matrix, meta, same
from .plan import PAD, state_dict

WEIGHT_MISTAKES = {"no_padding_mask": {"pad_mask": "none"}, "padding_mask_nan_rows": {"pad_mask": "all_queries"},
                   "future_mask_missing_in_details": {"future": False}, "scaled_by_model_width": {"scale": "d_model"},
                   "no_scaling": {"scale": "none"}, "softmax_over_queries": {"axis": -2}}


def gather(results, plan) -> dict:
    sd, t = state_dict(plan, "w"), plan["tensors"]
    ev = {"weights_match": []}
    for run in ("padded", "unpadded"):
        got = arrays(results, run)
        if "d_weights" not in got:
            continue
        ids = t[run]
        correct = reference.lm_forward_details(ids, sd, PAD)["weights"]
        for name, kw in WEIGHT_MISTAKES.items():
            wrong = reference.lm_forward_details(ids, sd, PAD, **kw)["weights"]
            # only where the mistake shows on this input (no padding, no padding mistake to see)
            if not same(wrong, correct) and same(got["d_weights"], wrong) and name not in ev["weights_match"]:
                ev["weights_match"].append(name)
        if run == "unpadded":
            ev["no_residual"] = same(got["d_contextual"], reference.lm_forward_details(ids, sd, PAD, residual=False)["contextual"])
            ev["no_position_rows"] = same(got["d_X"], reference.lm_forward_details(ids, sd, PAD, positions=False)["X"])
            ev["first_position"] = same(got["d_logits"], reference.lm_forward_details(ids, sd, PAD, readout=0)["logits"])
            ev["no_relu"] = same(got["d_hidden"], reference.lm_forward_details(ids, sd, PAD, relu=False)["hidden"])
        else:
            correct = reference.lm_forward_details(ids, sd, PAD)["logits"]
            leaky = reference.lm_forward_details(ids, sd, PAD, pad_mask="none")["logits"]
            ev["forward_ignores_padding"] = same(got["forward"], leaky) and not same(got["forward"], correct)
    grad = results.results.get("grad")
    if grad and not grad[0].get("error"):
        ev["no_gradient_anywhere"] = not grad[1]
    inspect = meta(results, "inspect")
    ev["biased_attention_projection"] = any(f"{n}.bias" in inspect.get("parameters", {})
                                            for n in ("W_Q", "W_K", "W_V", "W_O"))
    ev["W_O_unused"] = "W_O.weight" in inspect.get("seed_size_unused", [])
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
