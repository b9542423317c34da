"""A small grammar of single slips in a `Head`, applied to the judge's float64 reference, for naming by reproduction.

Instead of a catalogue entry per mistake, each slot of the head's computation (the mask's triangle and offset, its
fill, where it is applied, the scale's source and power, where the scale is applied, the softmax's axis, which
operands make the scores, pruning after the softmax, NaN rows papered over, what the weights multiply) has a few parameterised values; every single edit, then every
pair of edits on different slots, is computed on the judge's own inputs (each only as far as it still fits: most
fail on the first input's weights), and a submission is named by the edit whose weights AND output reproduce its
own at both geometries (plan.GEOMETRY2: other d, d_head and T_max, so a constant that happens to equal a size here is not taken
for the formula). What is shown is fixed text of the kit's with parameters of the grammar's: no student text.
"""
from __future__ import annotations

import itertools
import math

import torch

from attnkit.toolkit.evidence import arrays, same
from attnkit.toolkit.reference import causal_mask

from .plan import STATE_CALLS

# slot -> {value: (id, sentence)}: the sentence says what the edit does, in the student's terms.
MASK_OFFSETS = {-1: "diagonal_masked", 1: "mask_offset_plus_1", 2: "mask_offset_plus_2", -2: "mask_offset_minus_2"}
SCALES = {  # (source, power) -> (id, how it reads in code)
    ("d_head", 1.0): ("divide_by_dk", "/ d_head"), ("d_head", 0.0): ("no_scale", "no division at all"),
    ("d_head", -0.5): ("scale_multiplied", "* sqrt(d_head)"), ("d", 0.5): ("scale_by_model_width", "/ sqrt(d)"),
    ("d", 1.0): ("scale_by_d", "/ d"), ("T", 0.5): ("scale_by_length", "/ sqrt(T), T the sequence length"),
    ("T", 1.0): ("scale_by_length_unrooted", "/ T, T the sequence length"),
    ("half_d_head", 1.0): ("scale_precedence", "/ (d_head / 2)"),
    ("twice_d_head", 1.0): ("scale_precedence_unbracketed", "/ (2 * d_head)"),
}
SENTENCES = {
    "mask_offset_plus_1": "your mask lets each position also read the next one: it looks like torch.tril(..., "
                          "diagonal=1)",
    "mask_offset_plus_2": "your mask lets each position also read the next two: it looks like torch.tril(..., "
                          "diagonal=2)",
    "mask_offset_minus_2": "your mask hides each position and the one before it: it looks like torch.tril(..., "
                           "diagonal=-2)",
    "diagonal_masked": "your mask keeps the diagonal out: it looks like torch.tril(..., diagonal=-1)",
    "mask_upper_triangle": "your mask keeps the future and hides the past: it looks like torch.triu",
    "mask_filled_with_zero": "your masked scores are 0 instead of -inf, so exp(0) still gives the future weight",
    "mask_fill_positive": "your masked scores are a large positive number instead of -inf",
    "mask_after_softmax": "the future is zeroed after the softmax, so rows no longer sum to 1",
    "divide_by_dk": "your scores are divided by d_head instead of sqrt(d_head)",
    "no_scale": "your scores are not divided by sqrt(d_head) at all",
    "scale_multiplied": "your scores are multiplied by sqrt(d_head) instead of divided",
    "scale_by_model_width": "your scores are divided by sqrt(d), the input width, instead of sqrt(d_head)",
    "scale_by_d": "your scores are divided by d, the input width, instead of sqrt(d_head)",
    "scale_by_length": "your scores are divided by sqrt(T), the sequence length, instead of sqrt(d_head): the scale "
                       "is read from the wrong dimension (x.shape[1] or q.size(1) is T)",
    "scale_by_length_unrooted": "your scores are divided by T, the sequence length, instead of sqrt(d_head)",
    "scale_precedence": "your scores are divided by d_head / 2 instead of sqrt(d_head): `d_head ** 1/2` is read "
                        "by Python as (d_head ** 1) / 2, since ** binds tighter than / (write d_head ** 0.5); at "
                        "d_head = 4 the two agree, at 9 they do not",
    "scale_precedence_unbracketed": "your scores are divided by 2 * d_head instead of sqrt(d_head): `scores / "
                                    "d_head ** 1/2` is read by Python as (scores / d_head) / 2, since ** binds "
                                    "tighter than / (write scores / d_head ** 0.5)",
    "output_uses_transposed_weights": "your output is A^T V instead of A V: output i mixes the values with column i "
                                      "of the weights (the queries that read key i), so it reads the future",
    "stored_scores": "self.A holds the masked scores instead of the softmax's weights",
    "nan_rows_zeroed": "rows with no allowed position are turned from NaN into zeros (nan_to_num), so their weights "
                       "sum to 0",
    "output_mixes_inputs": "your output mixes the inputs x with the weights (A @ x) instead of the values (A @ v): "
                           "the value projection is never used",
    "scale_after_softmax": "the 1/sqrt(d_head) factor is applied to the weights after the softmax instead of to the "
                           "scores, so rows sum to 1/sqrt(d_head)",
    "softmax_wrong_axis": "the softmax runs over the query axis (dim=1), so columns sum to 1 instead of rows",
    "softmax_over_batch": "the softmax runs over the batch axis (dim=0)",
    "scores_transposed": "your scores are K Q^T instead of Q K^T",
    "key_from_query": "your keys come from self.query",
    "keys_summed_over_batch": "each query is scored against the keys summed over the whole batch (an einsum or "
                              "matmul whose batch index differs between q and k)",
}


def fixed_scale_sentence(c: float) -> str:
    return (f"your scores are divided by a fixed number, {c:g}, at every head width, instead of sqrt(d_head) (a "
            "constant, or a width read from outside the head, such as a notebook variable)")


def prune_sentence(p: float) -> str:
    return ("after the softmax, small weights (below a threshold, such as 1e-3) are set to 0 and the rows "
            "renormalised, so allowed positions lose their weight")


PRUNE = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5)   # one id: which of them fit depends on the draw
FIXED = (2.0, 4.0, 8.0, 16.0, 32.0)             # divisors a constant or a notebook width gives (d_head 4 .. 1024)


def _singles():
    """(slot, value) pairs, one per single edit."""
    out = [("mask", ("offset", k)) for k in MASK_OFFSETS] + [("mask", ("triu", 0))]
    out += [("fill", v) for v in (0.0, 1e9)] + [("fill", "after")]
    out += [("scale", k) for k in SCALES] + [("scale", ("fixed", c)) for c in FIXED] + [("scale", "after")]
    out += [("axis", a) for a in (-2, 0)]
    out += [("scores", s) for s in ("transposed", "key_from_query", "batch_sum")]
    out += [("prune", p) for p in PRUNE]
    out += [("output", o) for o in ("AT_v", "A_x")]
    out += [("nan", "zero")]           # alone it changes nothing: named only beside a slip that makes a NaN row
    out += [("stored", "scores")]      # blind set 13's m26: self.A the masked scores, beside a scale never applied
    return out


def edits():
    """Every single edit and every pair of edits on different slots, as tuples of (slot, value)."""
    s = _singles()
    return [(e,) for e in s] + [(a, b) for a, b in itertools.combinations(s, 2) if a[0] != b[0]]


def edited_head(x, wq, wk, wv, edit):
    """(out, A) of the reference head with ``edit`` applied, float64. x (B, T, d); w_* (d_head, d)."""
    return _edited(_base(x, wq, wk, wv), edit)


def _edited(base, edit):
    """(out, A) of the reference head with ``edit`` applied, from what every edit shares (``_base``)."""
    e = dict(edit)
    A = _weights(base, edit)                                                   # (B, T, T)
    o = e.get("output")
    stored = _weights(base, edit, scores=True) if e.get("stored") == "scores" else A     # what self.A holds
    return (A.transpose(-2, -1) @ base["v"] if o == "AT_v" else A @ base["x"] if o == "A_x" else A @ base["v"]), stored


def _base(x, wq, wk, wv) -> dict:
    """What every edit shares: q, k, v and the raw scores of each operand pairing, float64."""
    x = x.double()
    q, k, v = x @ wq.double().T, x @ wk.double().T, x @ wv.double().T          # (B, T, d_head)
    return {"x": x, "q": q, "k": k, "v": v, "d": x.shape[-1], "dh": wk.shape[0], "T": x.shape[1],
            "S": q @ k.transpose(-2, -1),                                            # (B, T, T)
            "key_from_query": q @ q.transpose(-2, -1),
            "batch_sum": q @ k.sum(0, keepdim=True).expand_as(k).transpose(-2, -1)}


def _weights(base, edit, scores=False):
    """The attention weights (B, T, T) of the reference with ``edit`` applied (with ``scores``: the masked
    scores the softmax reads)."""
    e = dict(edit)
    T, dh = base["T"], base["dh"]
    kind = e.get("scores")
    S = base["S"].transpose(-2, -1) if kind == "transposed" else base.get(kind, base["S"])
    sc = e.get("scale")
    if sc != "after":
        div = math.sqrt(dh) if sc is None else sc[1] if sc[0] == "fixed" else \
            {"d_head": dh, "d": base["d"], "T": T, "half_d_head": dh / 2, "twice_d_head": 2 * dh}[sc[0]] ** sc[1]
        S = S / div
    m = e.get("mask", ("offset", 0))
    ones = torch.ones(T, T, dtype=torch.bool)
    keep = ones.triu() if m[0] == "triu" else ones.tril(m[1])
    fill, axis = e.get("fill", float("-inf")), e.get("axis", -1)
    if scores:
        return S if fill == "after" else S.masked_fill(~keep, fill)
    A = torch.softmax(S, dim=axis) * keep if fill == "after" else torch.softmax(S.masked_fill(~keep, fill), dim=axis)
    if sc == "after":
        A = A / math.sqrt(dh)
    if e.get("nan") == "zero":
        A = A.nan_to_num(nan=0.0)
    p = e.get("prune")
    if p is not None:
        A = torch.where(A < p, torch.zeros_like(A), A)
        A = A / A.sum(-1, keepdim=True)
    return A


def ident(edit) -> str:
    """The edit's id: a catalogue id where the single edit is a catalogue entry, else the grammar's own; a pair
    joins its two with '+'."""
    return "+".join(_id(slot, val) for slot, val in edit)


def _id(slot, val) -> str:
    if slot == "mask":
        return "mask_upper_triangle" if val[0] == "triu" else MASK_OFFSETS[val[1]]
    if slot == "fill":
        return {0.0: "mask_filled_with_zero", 1e9: "mask_fill_positive", "after": "mask_after_softmax"}[val]
    if slot == "scale":
        if val == "after":
            return "scale_after_softmax"
        return f"scale_fixed_{val[1]:g}" if val[0] == "fixed" else SCALES[val][0]
    if slot == "axis":
        return {-2: "softmax_wrong_axis", 0: "softmax_over_batch"}[val]
    if slot == "nan":
        return "nan_rows_zeroed"
    if slot == "stored":
        return "stored_scores"
    if slot == "output":
        return {"AT_v": "output_uses_transposed_weights", "A_x": "output_mixes_inputs"}[val]
    if slot == "scores":
        return {"transposed": "scores_transposed", "key_from_query": "key_from_query",
                "batch_sum": "keys_summed_over_batch"}[val]
    return "prune_and_renormalise"


HOW = ("; the judge reproduced your weights and outputs"
       " by making this change to a correct head, on its own inputs and at a second head size")


def sentence(edit) -> str:
    return _sentence(edit) + HOW


def _sentence(edit) -> str:
    parts = []
    for slot, val in edit:
        i = _id(slot, val)
        parts.append(fixed_scale_sentence(val[1]) if i.startswith("scale_fixed_") else
                     prune_sentence(val) if slot == "prune" else SENTENCES[i])
    return "; and ".join(parts)


def _runs(plan) -> dict:
    t = plan["tensors"]
    return {"x": (t["x"], t["w_query"], t["w_key"], t["w_value"]),
            "x_tiny": (t["x_tiny"], t["w_query"], t["w_key"], t["w_value"]),
            "g2": (t["x_g2"], t["g2_query"], t["g2_key"], t["g2_value"])}


def reproduce(results, plan) -> list:
    """The edits whose (out, A) reproduce the submission's on the causal input, the tiny-weights input and the
    second geometry; singles first, so a pair is named only when no single edit fits. Each edit is computed only
    as far as it still fits (the causal input's weights first: most edits fail there), so a submission costs a few
    hundred tiny float64 heads, and one that no edit changes is never named."""
    causal, g2 = arrays(results, "causal"), arrays(results, "geometry2")
    got = {"x": (causal.get("out0"), causal.get("A0")), "x_tiny": (causal.get("out5"), causal.get("A5")),
           "g2": (g2.get("out0"), g2.get("A0"))}
    if any(a is None or o is None for o, a in got.values()):
        return []
    bases = {n: _base(*args) for n, args in _runs(plan).items()}
    correct = {n: _edited(b, ()) for n, b in bases.items()}
    if all(same(got[n][0], correct[n][0]) and same(got[n][1], correct[n][1]) for n in got):
        return []                             # right everywhere: a slip elsewhere, not one of these
    found = []
    for edit in edits():
        if found and len(edit) > len(found[0]):
            break
        fits, made = True, {}
        for n in ("x", "g2", "x_tiny"):
            made[n] = out, A = _edited(bases[n], edit)
            if not (same(got[n][1], A) and same(got[n][0], out)):
                fits = False
                break
        if fits and not all(same(made[n][0], correct[n][0]) and same(made[n][1], correct[n][1]) for n in bases):
            found.append(edit)
    return found


MEASURED = "; the judge measured this on its own runs of your code"


# the state run's call on a batch of one, found by its input (a call added before it would move it)
B1_CALL = next(i for i, (_, x, _) in enumerate(STATE_CALLS) if x == "x_b1")


def observed(results, plan) -> list:
    """Slips reproduced by what the judge's runs show directly rather than by numbers: the widths of the projections,
    an output whose size-1 axes are dropped, a tensor made on the CPU inside forward, a float16 output. (id, sentence)
    pairs, each only when what it says was measured."""
    from . import reference
    from .plan import D, D_HEAD
    from attnkit.toolkit.evidence import meta
    found = []
    linears = meta(results, "inspect").get("linears", {})
    for name in ("query", "key", "value"):
        m = linears.get(name, {})
        if m.get("is_linear") and m.get("in") == D and m.get("out") == D and D != D_HEAD:
            found.append((f"{name}_width_d", f"self.{name} is nn.Linear(d, d) instead of nn.Linear(d, d_head), so "
                                             f"its output has the input's width d"))
    t = plan["tensors"]
    b1 = arrays(results, "state").get(f"out{B1_CALL}")
    ref, _ = reference.head_forward(t["x_b1"], t["w_query"], t["w_key"], t["w_value"], causal=True)
    if b1 is not None and b1.dim() < 3 and same(b1, ref.squeeze(0).float()):
        found.append(("output_squeezed", "forward's output loses its size-1 axes: with a batch of one it has shape "
                                          f"{tuple(b1.shape)} instead of {tuple(ref.shape)} (a bare .squeeze())"))
    causal = arrays(results, "causal")
    ref_out, ref_A = reference.head_forward(t["x"], t["w_query"], t["w_key"], t["w_value"])   # (B, T, d_head), (B, T, T)
    right = "A0" in causal and same(causal.get("out0"), ref_out.float())
    A0 = causal.get("A0")
    if right and A0 is not None and A0.dim() == 2 and ref_A.shape[0] > 1:
        for how, made in (("only the first example's weights (A[0])", ref_A[0]),
                          ("the weights averaged over the batch", ref_A.mean(0))):
            if same(A0, made.float()):
                found.append(("A_one_matrix", f"self.A keeps {how}, shape {tuple(A0.shape)}, instead of every "
                                              f"example's, shape {tuple(ref_A.shape)}; forward's output is right"))
    if right:
        found += _stale_keys_values(results, plan)
        found += _A_kept_in_eval(results, plan)
    plain = meta(results, "inspect").get("plain_tensors")   # a tensor attribute stays behind too: the catalogue names it
    if right and meta(results, "meta").get("device_mismatch") and not plain:
        found.append(("tensor_made_on_cpu_in_forward", "a tensor forward builds on the CPU (a mask made with "
                                                       "torch.ones or torch.tril, not taken from the buffer or made on "
                                                       "x.device) does not move with the head to another device: "
                                                       "with the head moved, it met the moved tensors" + (
                                                           results.quote(meta(results, "meta").get("device_line"))
                                                           or " in forward")))
    if "float16" in meta(results, "causal").get("dtypes", []):
        found.append(("half_precision", "your output is float16: half precision rounds the weights and outputs to "
                                        "about 1e-3, far from a float32 head's"))
    return [(i, text + MEASURED) for i, text in found]


def _A_kept_in_eval(results, plan) -> list:
    """One head's eval-mode call on a new input returned the right output while self.A stayed what the call before it
    stored (blind set 11: self.A assigned only `if self.training`)."""
    from . import reference
    t, calls = plan["tensors"], arrays(results, "state")
    w = (t["w_query"], t["w_key"], t["w_value"])

    def stale(i, mode):             # call i (of ``mode``) on another input than the call before it kept its A
        name = STATE_CALLS[i][1]
        if STATE_CALLS[i][2] != mode or i == 0 or STATE_CALLS[i - 1][1] == name:
            return False
        out, A, before = calls.get(f"out{i}"), calls.get(f"A{i}"), calls.get(f"A{i - 1}")
        right_out, right_A = reference.head_forward(t[name], *w)
        return same(out, right_out.float()) and same(A, before) and not same(A, right_A.float())
    calls_made = range(len(STATE_CALLS))
    if not any(stale(i, "eval") for i in calls_made):
        return []
    if any(stale(i, "train") for i in calls_made):      # blind set 12's m16: assigned on the first call only
        return [("A_stored_once", "self.A is not updated after the first call: later calls on other inputs, in "
                                  "training and in eval mode, returned the right output but left self.A holding an "
                                  "earlier call's weights; store A.detach() in self.A on every call")]
    return [("A_not_stored_in_eval", "self.A is not updated in eval mode: after .eval(), a call on a shorter input "
                                     "returned the right output, but self.A still held the previous call's weights "
                                     "(while the training-mode calls updated it); store A.detach() in self.A on "
                                     "every call")]


def _stale_keys_values(results, plan) -> list:
    """The causal run calls one head on x, then on other inputs of x's shape: an output there that is the first
    call's keys and values read by the new input's queries (a cache kept on the head and reused while the shape
    matches; blind set 7), where a correct head's differs."""
    from . import reference
    t = plan["tensors"]
    w = (t["w_query"], t["w_key"], t["w_value"])
    inputs = next(e["inputs"] for e in plan["experiments"] if e["name"] == "causal")
    causal = arrays(results, "causal")
    first = t[inputs[0]].double()
    k, v = first @ w[1].double().T, first @ w[2].double().T                         # (B, T, d_head)
    for i, name in enumerate(inputs[1:], start=1):
        x, got = t[name], causal.get(f"out{i}")
        if got is None or x.shape != first.shape or torch.equal(x.double(), first):
            continue
        right, _ = reference.head_forward(x, *w)
        q = x.double() @ w[0].double().T                                           # (B, T, d_head)
        s = (q @ k.transpose(-2, -1) / math.sqrt(w[1].shape[0])).masked_fill(
            ~causal_mask(x.shape[1]), float("-inf"))                               # (B, T, T)
        stale = torch.softmax(s, -1) @ v
        if same(got, stale) and not same(got, right):
            return [("stale_keys_values", "forward reuses the keys and values of its first call on later inputs of "
                                          "the same shape (a cache kept on the head): a second input's output is "
                                          "its queries read against the first input's keys and values")]
    return []


def beside(results, plan) -> list:
    """Slips the shapes of forward's outputs show whatever the numbers are, named beside the edit that reproduces
    the rest: a batch of one losing its batch axis while the full batch keeps it (a bare .squeeze())."""
    t = plan["tensors"]
    b1, full = arrays(results, "state").get(f"out{B1_CALL}"), arrays(results, "causal").get("out0")
    want = (1, *t["x_b1"].shape[1:-1], t["w_value"].shape[0])                          # (1, T, d_head)
    if b1 is not None and full is not None and tuple(b1.shape) == want[1:] and full.dim() == 3:
        return [("output_squeezed", "forward's output loses its size-1 axes: with a batch of one it has shape "
                                    f"{tuple(b1.shape)} instead of {want}, while a larger batch keeps its own (a "
                                    f"bare .squeeze()){MEASURED}")]
    return []

