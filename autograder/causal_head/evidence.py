"""Facts about a submitted `Head`, measured from its own arrays, for the diagnosis catalogue."""
import torch

from attnkit.toolkit.evidence import arrays, as_json_matrix, error, fused_in_source, meta, same, watched_ops

from . import reference
from .plan import GRAD_TARGET, LENGTHS, PERTURBED, T_G2

def gather(results, plan) -> dict:
    t = plan["tensors"]
    w = (t["w_query"], t["w_key"], t["w_value"])
    ev = {}
    variants = reference.head_weight_variants(t["x"], *w, causal=True)
    causal = arrays(results, "causal")
    if "A0" in causal:
        ev["weights_correct"] = same(causal["A0"], variants["correct"])
        also_g2 = _g2_weights_match(results, plan)         # once: every variant of the second geometry
        ev["weights_match"] = [n for n, v in variants.items() if n != "correct" and v is not None
                               and not same(v, variants["correct"]) and same(causal["A0"], v) and n in also_g2]
        ref_out, _ = reference.head_forward(t["x"], *w, causal=True)
        v = t["x"].double() @ w[2].double().T                                   # (B, T, d_head)
        # the variants forward also computed its output with (not only stored): a name says how the head computes
        ev["computed_with"] = [n for n in ev["weights_match"] if same(causal.get("out0"), (variants[n] @ v).float())]
        ev["output_correct"] = same(causal.get("out0"), ref_out.float())
        ev["changed_by_first_call"] = bool(meta(results, "causal").get("changed_by_first_call"))
        ev["nondeterministic"] = "out2" in causal and not torch.equal(causal["out2"].nan_to_num(),   # NaN: same
                                                                      causal["out0"].nan_to_num()) \
            and not ev["changed_by_first_call"]       # state the first call left behind is no randomness
        roles = reference.head_role_variants(t["x"], *w, causal=True)
        ev["roles_match"] = [r for r, (o, a) in roles.items() if same(causal.get("out0"), o.float())
                             and same(causal["A0"], a)]
        ev["returned_weights"] = same(causal.get("out0"), variants["correct"])
        q, k = t["x"].double() @ w[0].double().T, t["x"].double() @ w[1].double().T
        scores = (q @ k.transpose(-2, -1) / w[1].shape[0] ** 0.5).masked_fill(~reference.causal_mask(q.shape[1]),
                                                                              float("-inf"))
        ev["stored_scores"] = ev["output_correct"] and same(causal["A0"], scores)
        ev["wrong_only_below_T_max"] = _wrong_only_below_T_max(results, ev, plan)
        ev["residual_inside_head"] = ev["weights_correct"] and same(causal.get("out0"), (ref_out + v).float())
        ev["stored_exponentials"] = ev["output_correct"] and same(causal["A0"], variants["softmax_not_normalised"])
        # right on ordinary inputs, the same twice (no state that breaks later calls), NaN as the unshifted softmax
        ev["overflows_on_huge_scores"] = bool(ev["weights_correct"] and ev["output_correct"]) and \
            not ev["changed_by_first_call"] and same(causal.get("A2"), causal["A0"]) and \
            any(same(causal.get("A8"), a) for a in reference.unshifted_softmax_weights(t["x_huge"], *w))
        leak = _future_in_last_bits(results, causal) if ev["weights_correct"] and ev["output_correct"] else None
        ev["future_in_last_bits"], ev["future_cancelled_in_graph"] = leak == "outside", leak == "in_graph"
    noncausal = arrays(results, "noncausal")
    if "A0" in noncausal:
        causal_variants = variants
        ev["noncausal_is_masked"] = same(noncausal["A0"], causal_variants["correct"])
        open_out, _ = reference.head_forward(t["x"], *w, causal=False)
        ev["noncausal_zero_fill"] = same(noncausal["A0"], causal_variants["mask_filled_with_zero"]) and \
            bool(ev.get("weights_correct"))
        ev["noncausal_stored_masked"] = same(noncausal.get("out0"), open_out.float()) and \
            same(noncausal["A0"], causal_variants["mask_after_softmax"])
        # the causal head right, the open one computed with unscaled scores (blind set 8: m38 divided inside `if
        # self.causal:`): its weights and its output both
        unscaled = reference.head_weight_variants(t["x"], *w, causal=False)["no_scale"]            # (B, T, T)
        ev["noncausal_unscaled"] = bool(ev.get("weights_correct") and ev.get("output_correct")) and \
            same(noncausal["A0"], unscaled) and \
            same(noncausal.get("out0"), (unscaled @ (t["x"].double() @ w[2].double().T)).float())
    # the judge's inputs are float32: a float64 output is forward's own doing
    ev["output_float64"] = "float64" in meta(results, "causal").get("dtypes", [])
    ev["projections_shared"] = bool(meta(results, "inspect").get("shared"))
    grad_meta = meta(results, "grad")
    ev["output_detached"] = grad_meta.get("out_requires_grad") is False and bool(ev.get("weights_correct"))
    built = arrays(results, "defaults").get("A0")
    if built is not None and "A0" in causal and "A0" in noncausal:
        ev["default_not_causal"] = same(built, noncausal["A0"]) and not same(built, causal["A0"])
    ev["input_detached"] = grad_meta.get("out_requires_grad") is True and "grad_x" not in arrays(results, "grad") \
        and "grad_value" in arrays(results, "grad") and bool(ev.get("weights_correct"))
    # Mask not sliced, reproduced: the full T_max x T_max mask meets a T x T score matrix at every shorter length
    # (a size error there, and only there), while the full length is right. One failing length, or a head wrong
    # everywhere, is some other mistake (a stray squeeze at T = 1, a value layer of the wrong width).
    # State, reproduced by what the same instance does: fresh heads right at every length, the same head called at
    # one length then at T_max raises or differs, and no buffer or weight changed (something else was kept).
    ev["kept_from_first_call"] = _kept_from_first_call(results, ev)
    ev["mask_only_in_training"] = _mask_only_in_training(results, plan, ev)
    buffers = meta(results, "inspect").get("buffers", {})
    ev["buffer_changed_by_forward"] = any(n in buffers for run in ("causal", *(f"len{T}" for T in LENGTHS))
                                          for n in meta(results, run).get("changed_by_first_call", []))
    # whatever the full-length numbers are (blind sets 11 and 12: an unsliced mask paired with a scale of sqrt(d)):
    # both geometries run at T_max and fail on a size at every shorter length
    ev["short_fails_on_shape"] = "out0" in arrays(results, "causal") and "out0" in arrays(results, "geometry2") \
        and all("size" in str(error(results, f"len{T}").get("raw", "")) for T in LENGTHS) \
        and "size" in str(error(results, f"geometry2_len{T_G2}").get("raw", ""))
    grads = arrays(results, "grad")
    if grads:
        dead = [n for n in ("query", "key") if f"grad_{n}" not in grads or grads[f"grad_{n}"].abs().max() == 0]
        ev["qk_without_gradient"] = bool(dead) and "grad_value" in grads and grads["grad_value"].abs().max() > 0
    ev["A_requires_grad"] = bool(meta(results, "grad").get("A_requires_grad"))
    inspect = meta(results, "inspect")
    ev["tril_is_parameter"] = any(n.endswith("tril") for n in inspect.get("parameters", {}))
    ev["tril_plain_attribute"] = "tril" in inspect.get("plain_tensors", {}) and "tril" not in inspect.get("buffers", {})
    squares = arrays(results, "inspect")
    ev["mask_buffer_misnamed"] = "tril" not in inspect.get("buffers", {}) and any(
        n.startswith("square_") and n[len("square_"):] in inspect.get("buffers", {})
        and torch.equal(a != 0, reference.causal_mask(a.shape[0])) for n, a in squares.items())
    ev["biased_projection"] = any(m.get("bias") for m in inspect.get("linears", {}).values())
    ev["uses_fused_attention"] = bool(watched_ops(results)[0] or fused_in_source(results))
    return ev


def _future_in_last_bits(results, causal) -> str | None:
    """A later token changes earlier outputs, within float32 rounding only: "outside" when the gradient of an output
    with respect to every later token is exactly zero (the future reaches the present outside the graph),
    "in_graph" when it is not zero but rounding-small (below LEAK_ROUNDING of the past's) somewhere (the future
    enters the graph and cancels up to rounding); else None."""
    from .checks import LEAK_ROUNDING
    p, (b, t) = PERTURBED, GRAD_TARGET
    earlier = [(causal["out0"][:, :p], causal[k][:, :p]) for k in ("out1", "out3") if k in causal]
    moved = any(not torch.equal(a, c) for a, c in earlier) and all(same(a, c) for a, c in earlier)
    grads = [arrays(results, n).get("grad_x") for n in ("grad", "grad_neg")]
    if not moved or any(g is None for g in grads):
        return None
    leaks = [(g[b, t + 1:].abs().max(), g[b, :t + 1].abs().max()) for g in grads]
    if all(leak == 0 for leak, _ in leaks):
        return "outside"
    return "in_graph" if all(leak <= LEAK_ROUNDING * past for leak, past in leaks) else None


def _mask_only_in_training(results, plan, ev) -> bool:
    """Right in train mode (the causal run), and on one instance every eval-mode call is a head's without the
    causal mask (blind set 9's m17: the mask applied only `if self.training`)."""
    from .plan import STATE_CALLS
    if not (ev.get("weights_correct") and ev.get("output_correct")):
        return False
    t = plan["tensors"]
    calls = arrays(results, "state")
    evals = [(i, name) for i, (_, name, mode) in enumerate(STATE_CALLS) if mode == "eval"]
    open_out = {name: reference.head_forward(t[name], t["w_query"], t["w_key"], t["w_value"], causal=False)[0]
                for _, name in evals}
    return bool(evals) and all(same(calls.get(f"out{i}"), open_out[name].float()) for i, name in evals)


def _kept_from_first_call(results, ev) -> bool:
    changed = any(meta(results, run).get("changed_by_first_call") for run in ("causal", *(f"len{T}" for T in LENGTHS)))
    if not (ev.get("weights_correct") and ev.get("output_correct")) or changed:
        return False
    full = arrays(results, "causal").get("out0")
    later_wrong = False
    for T in LENGTHS:
        run = arrays(results, f"len{T}")
        if run.get("out0") is None or not same(run["out0"], full[:, :T]):
            return False                                  # a fresh head is already wrong: not state
        then = run.get("then_out0")
        err = (meta(results, f"len{T}").get("then_errors") or {}).get("0")
        later_wrong |= err is not None or then is None or not same(then, full)
    return later_wrong


def _g2_weights_match(results, plan) -> set:
    """The weight variants the second geometry's causal weights reproduce ("correct" included)."""
    t = plan["tensors"]
    got = arrays(results, "geometry2").get("A0")
    if got is None:
        return set()
    variants = reference.head_weight_variants(t["x_g2"], t["g2_query"], t["g2_key"], t["g2_value"], causal=True)
    return {n for n, v in variants.items() if v is not None and same(got, v)}


def _g2_right(results, plan) -> bool:
    """The second geometry's full-length output and weights are a correct head's."""
    t = plan["tensors"]
    out, A = reference.head_forward(t["x_g2"], t["g2_query"], t["g2_key"], t["g2_value"], causal=True)
    got = arrays(results, "geometry2")
    return same(got.get("out0"), out.float()) and same(got.get("A0"), A.float())


def _wrong_only_below_T_max(results, ev, plan) -> bool:
    """Wrong block of the mask, reproduced: right at T_max, and at every shorter length either right or exactly
    what the reference computes with some other T x T block of the full mask (e.g. tril[:T, -T:]); at least one
    length is such a block. A length that is wrong in any other way (an error, a shape, other numbers) is not
    this mistake."""
    if not (ev.get("weights_correct") and ev.get("output_correct") and _g2_right(results, plan)):
        return False
    t = plan["tensors"]
    w = (t["w_query"], t["w_key"], t["w_value"])
    full = reference.causal_mask(LENGTHS[-1] + 1)
    found = False
    for T in LENGTHS:
        out = arrays(results, f"len{T}").get("out0")
        x = t[f"x_len{T}"]
        if out is not None and same(out, reference.head_forward(x, *w, causal=True)[0].float()):
            continue
        blocks = [full[a:a + T, b:b + T] for a in range(len(full) - T + 1) for b in range(len(full) - T + 1)
                  if (a, b) != (0, 0)]
        if out is None or not any(same(out, reference.head_with_mask(x, *w, m).float()) for m in blocks):
            return False
        found = True
    return found


def attention_pattern(results, plan) -> dict:
    """The student's causal weights beside a correct head's, on an input drawn for this picture alone: no check
    reads it, so what the feedback shows of it says nothing about the graded inputs (which every submission of
    the course shares, attnkit/engine/secret.py)."""
    t = plan["tensors"]
    _, expected = reference.head_forward(t["x_show"], t["w_query"], t["w_key"], t["w_value"], causal=True)
    got = arrays(results, "causal").get("A7")
    ok = got is not None and tuple(got.shape) == tuple(expected.shape)
    return {"caption": "causal head, an input drawn for this picture (T = 6): row i = query position, column j = "
                       "key position",
            "student": as_json_matrix(got[0]) if ok else None, "expected": as_json_matrix(expected[0])}
