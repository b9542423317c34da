"""The hidden checks for `TeachingAttentionLM`. Each is a pytest test over the judge's own data.

Verdicts are computed here from arrays the student's process returned for
windows and weights the judge generated (see plan.py). Windows are built as
the notebook builds them (left padding, a real last token), so a correct
`forward` that returns `forward_details(ids)["logits"]` never loses a point.
Padded query rows are not compared with the reference: the contract only
asks that they be finite and sum to 1.
"""
import torch
import torch.nn.functional as F

from . import reference
from attnkit.toolkit.measure import require_scale
from attnkit.toolkit.require import CheckFailed, require
from attnkit.toolkit.evidence import meta as meta_of, require_own_attention

from .evidence import close, default_shape_errors, grads_off
from .plan import B, D_K_SCALING, DEFAULTS, OTHER_PAD, OVERFIT, PAD, SEED_PARAMS, SEED_SIZES, STATE_CALLS, STATE_T, T, V, length_runs, \
    state_dict, stress_runs

ATOL, RTOL = 1e-5, 1e-4
ZERO = 1e-12
RUNS = ("padded", "unpadded")


def _ids(plan, name):
    return plan["tensors"][name]


def _shape(t, shape, what):
    require(tuple(t.shape) == tuple(shape), f"{what} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t


def _weights(run, ids):
    n, L = ids.shape
    return _shape(run["d_weights"], (n, L, L), "forward_details()['weights']")


def _windows(name, L):
    kind = name if name in RUNS else "padded and unpadded"
    return f"{kind} windows of length {L}"


def _lengths(ls):
    return ", ".join(map(str, sorted(set(ls))))


class _Run:
    """One call's arrays as the per-run checks read them: ``run["d_weights"]``, ``run.arrays``."""
    def __init__(self, arrays):
        self.arrays = arrays

    def __getitem__(self, key):
        if key not in self.arrays:
            raise CheckFailed(f"the submission produced no `{key}` in this check")
        return self.arrays[key]


def _state_runs(results):
    """The `state` run's (meta, arrays), or an empty pair when it did not run."""
    entry = results.results.get("state")
    return ((entry[0].get("meta") or {}), entry[1]) if entry and not entry[0].get("error") else ({}, {})


def _one_instance_calls(results, plan):
    """(run, ids, where) of the calls on one instance (plan.STATE_CALLS) that the per-length checks read: every
    eval-mode call but the edited window (the future check's own). A call that raised fails as such."""
    meta, arrays = _state_runs(results)
    if not meta and not arrays:
        return
    for i, (what, name, mode) in enumerate(STATE_CALLS):
        if mode == "train" or name.endswith("_edit"):
            continue
        ids = _ids(plan, name)
        where = f"the same model called at T = {T} first, {what} (windows of length {ids.shape[1]})"
        err = (meta.get("errors") or {}).get(str(i))
        require(err is None, f"{where}, forward_details or forward raised {err}: a model must not keep anything "
                             "of an earlier call (a mask built for the first length)")
        yield i, _Run({k[len(f"c{i}_"):]: v for k, v in arrays.items() if k.startswith(f"c{i}_")}), ids, where


def every_length(results, plan, one_run, stress=False):
    """``one_run(name, run, ids, where, prefix)`` on every window length 1..T, padded and unpadded, then on the calls of
    one instance as a notebook makes them (and, with ``stress``, on the runs built to stress the weights); fails
    naming the lengths.

    The first failure's sentence is kept; when the property holds at some lengths only, the sentence
    says at which lengths it fails and where it holds, so a model built for full windows only learns why.
    """
    failed, held = [], []
    for name, L in length_runs():
        try:
            one_run(name, results.get(name), _ids(plan, name), _windows(name, L), "w")
            held.append(L)
        except CheckFailed as e:
            failed.append((L, str(e)))
    if failed:
        first = failed[0][1]
        bad = [L for L, _ in failed]
        good = [L for L in held if L not in bad]
        where = f"fails at window lengths {_lengths(bad)} of 1..{T}, holds at {_lengths(good)}"
        # named when the property holds somewhere it means something (length 1 has no future and no padding)
        raise CheckFailed(f"{first} ({where})" if any(L > 1 for L in good) else first)
    for name, prefix, where in stress_runs() if stress else ():
        one_run(name, results.get(name), _ids(plan, "padded"), where, prefix)
    for i, run, ids, where in _one_instance_calls(results, plan):
        one_run(f"state{i}", run, ids, where, "w")


def _differ(a, b) -> bool:
    return a is None or b is None or a.shape != b.shape or not torch.equal(a.nan_to_num(), b.nan_to_num())


def repeat_cause(results) -> str | None:
    """Why two calls of one model on the same windows disagree, as measured, or None when they agree: measured
    on the `state` run (the same windows twice in eval mode, twice in train mode; buffers and parameters before
    and after the first call) before any check reads a difference as the future's or the order's."""
    meta, calls = _state_runs(results)
    keys = ("d_contextual", "d_weights", "forward")
    if not all(f"c{i}_{k}" in calls for i in (3, 4, 5, 6) for k in keys):
        return None
    eval_differ = any(_differ(calls[f"c3_{k}"], calls[f"c4_{k}"]) for k in keys)
    if not eval_differ:
        return None                 # train mode may differ (nn.Dropout): the checks read eval mode only
    changed = meta.get("changed_by_first_call") or []
    if changed:
        return (f"forward_details changed {', '.join(f'`{n}`' for n in changed[:3])} during its first call, so the "
                "next call on the same windows computed something else: a call must leave the model's buffers and "
                "parameters as it found them")
    train_differ = any(_differ(calls[f"c5_{k}"], calls[f"c6_{k}"]) for k in keys)
    return ("two calls on the same windows gave different results in eval mode" +
            (" (and in train mode)" if train_differ else "") + ": something random runs even in eval mode (dropout "
            "that never switches off, such as F.dropout without training=self.training, or a random draw); "
            "model.eval() must make the model deterministic")


def _unless_random(what):
    """A check that compares two calls' values fails, when the model is not deterministic in eval mode, with
    that measurement instead of a cause it cannot tell apart from randomness (the future, the order, a formula)."""
    def wrap(check):
        def checked(results, plan):
            try:
                check(results, plan)
            except CheckFailed as e:
                cause = repeat_cause(results)
                if cause is None:
                    raise
                raise CheckFailed(f"{what} cannot be measured: {cause}") from e
        checked.__name__, checked.__doc__ = check.__name__, check.__doc__
        return checked
    return wrap


@_unless_random("whether forward equals forward_details")
def test_forward_matches_details(results, plan):
    """forward(ids) equals forward_details(ids)['logits'], on padded and unpadded windows of every length."""
    def one(name, run, ids, where, prefix):
        fwd = _shape(run["forward"], (ids.shape[0], V), f"forward() on {where}")
        det = _shape(run["d_logits"], (ids.shape[0], V), "forward_details()['logits']")
        require(close(fwd, det),
                f"on {where} forward(ids) differs from forward_details(ids)['logits'] by up to "
                f"{(fwd - det).abs().max():.3g}; both must compute the last position's logits the same way")
    every_length(results, plan, one)


def test_no_future_weight(results, plan):
    """No weight on future keys (j > i), for every query row, at every length. A NaN row carries no
    measured weight: it is the finiteness check's business."""
    def one(name, run, ids, where, prefix):
        W = _weights(run, ids)
        future = ~reference.causal_mask(ids.shape[1])
        seen = W[:, future].nan_to_num(0.0)
        leak = seen.abs().max().item() if seen.numel() else 0.0
        require(leak <= ZERO, f"on {where} the attention gives weight {leak:.3g} to future keys (j > i)")
    every_length(results, plan, one)


def _row_sum_cause(run, W):
    """What the returned arrays show about rows that do not sum to 1 (a cause only when measured)."""
    cols = (W.sum(-2) - 1).abs().max().item()
    if cols <= ATOL:
        return "the columns sum to 1 instead: the softmax was taken over the queries; normalise over the keys (dim=-1)"
    S = run.arrays.get("d_scores")
    if S is not None and S.shape == W.shape and torch.isfinite(S).all():
        plain = torch.softmax(S, dim=-1)
        kept = W.abs() > ZERO
        if torch.allclose(W[kept], plain[kept], atol=ATOL, rtol=RTOL):
            return ("each weight equals the softmax of the unmasked scores, with masked ones zeroed afterwards: "
                    "mask the scores with -inf before the softmax")
    return "normalise over the key axis, after masking"


@_unless_random("whether the rows of the weights sum to 1")
def test_rows_sum_to_one(results, plan):
    """Every row of the weights sums to 1 and every tensor is finite, padded rows included, at every length."""
    def one(name, run, ids, where, prefix):
        W = _weights(run, ids)
        for key, t in run.arrays.items():
            if key.startswith("d_") and key != "d_masked_scores" and not torch.isfinite(t).all():
                require(False, f"on {where} forward_details()['{key[2:]}'] contains NaN or inf"
                               + _nan_rows(run, ids, key))
        require((W >= 0).all(), f"on {where} attention weights are negative somewhere")
        err = (W.sum(-1) - 1).abs().max().item()
        require(err <= ATOL, f"on {where} rows of the weights do not sum to 1 (error {err:.3g}); "
                             + _row_sum_cause(run, W))
    every_length(results, plan, one, stress=True)


def _nan_rows(run, ids, key):
    """Which query rows are not finite, and whether every key of those rows was masked (-inf)."""
    W, M = run.arrays.get("d_weights"), run.arrays.get("d_masked_scores")
    if key != "d_weights" or W is None or W.shape != (*ids.shape, ids.shape[1]):
        return ""
    bad = ~torch.isfinite(W).all(-1)                                            # (n, L) query rows
    padded = bad & ids.eq(PAD)
    kind = ("padded queries" if padded.all() or padded.eq(bad).all() else
            "real queries" if not padded.any() else "padded and real queries")
    text = f": the weight rows of {int(bad.sum())} {kind} are NaN"
    if M is not None and M.shape == W.shape and torch.isneginf(M[bad]).all():
        text += (", and every key of those rows is masked (-inf) in masked_scores: a query must keep at "
                 "least one key (a padded query may read the padded keys before it)")
    return text


@_unless_random("whether information flows from the future")
def test_future_edit(results, plan):
    """Editing the last token leaves the earlier positions' representations unchanged, at every length, and on one
    instance called at several lengths."""
    def one(name, run, ids, where, prefix):
        if name == "padded" or name.startswith("state"):
            return                                  # the unpadded full-length windows have their own edited run
        b = results.get("edit")["d_contextual"] if name == "unpadded" else run["edit_contextual"]
        _edit_unchanged(run["d_contextual"], b, where)
    every_length(results, plan, one)
    meta, calls = _state_runs(results)
    names = [name for _, name, _ in STATE_CALLS]
    i, j = names.index(f"len{STATE_T}"), names.index(f"len{STATE_T}_edit")
    if meta and str(i) not in meta.get("errors", {}):       # the call itself raising is the other checks' finding
        where = f"the same model called at T = {T} first, {STATE_CALLS[j][0]}"
        err = meta.get("errors", {}).get(str(j))
        require(err is None, f"{where}, forward_details raised {err}")
        _edit_unchanged(calls.get(f"c{i}_d_contextual"), calls.get(f"c{j}_d_contextual"), where)


def _edit_unchanged(a, b, where):
    require(a is not None and b is not None and a.shape == b.shape,
            f"on {where} forward_details()['contextual'] changed shape when the last token changed")
    diff = (a[:, :-1] - b[:, :-1]).abs()
    diff = diff.masked_fill(a[:, :-1].isnan() & b[:, :-1].isnan(), 0.0).nan_to_num(float("inf"))  # NaN both times: no change seen
    change = diff.max().item() if diff.numel() else 0.0
    require(change < 1e-6, f"on {where} editing the last token changed earlier contextual rows by up to "
                           f"{change:.3g}: information flows from the future")


def test_finite_gradients(results, plan):
    """A cross-entropy loss on forward() gives finite gradients that reach every parameter."""
    run = results.get("grad")
    names = run.meta.get("parameters", [])
    zero = lambda n: run.arrays.get(f"grad:{n}") is not None and not run.arrays[f"grad:{n}"].abs().max() > 0  # noqa: E731
    require(names, "the model has no parameters")
    for n in names:
        g = run.arrays.get(f"grad:{n}")
        require(g is not None, f"no gradient reaches {n}: the parameter is not used by forward "
                               "(or something is detached)")
        require(torch.isfinite(g).all(), f"the gradient of {n} contains NaN or inf")
    if zero("W_Q.weight") and zero("W_K.weight") and not zero("W_V.weight"):
        require(False, "the gradients of W_Q.weight and W_K.weight are exactly zero while W_V.weight's is not: "
                       "the loss does not depend on the attention scores (every attention row forward's output "
                       "reads has a single allowed key, or the scores never reach the output)")
    for n in ("W_Q.weight", "W_K.weight", "W_V.weight", "W_O.weight", "position_embedding.weight"):
        g = run.arrays.get(f"grad:{n}")
        require(g is not None and g.abs().max() > 0, f"the gradient of {n} is zero: the attention path "
                                                     "does not reach the loss")


def test_tiny_batch_overfit(results, plan):
    """The model can memorise 16 targets: loss < min(0.15, initial / 10) within 220 AdamW steps."""
    run = results.get("overfit")
    y = plan["tensors"]["overfit_y"]
    shape = (OVERFIT["n"], OVERFIT["vocab_size"])
    before = F.cross_entropy(_shape(run["logits_before"], shape, "forward() output"), y).item()
    after = F.cross_entropy(_shape(run["logits_after"], shape, "forward() output"), y).item()
    limit = min(0.15, before / 10)
    require(after < limit, f"tiny-batch overfit failed: loss {before:.3f} -> {after:.4f} after "
                           f"{OVERFIT['steps']} steps, needs < {limit:.3f}; a correct model memorises 16 targets")


def test_padded_keys(results, plan):
    """Real queries put no weight on padded keys, at every length (a NaN row carries no measured weight)."""
    def one(name, run, ids, where, prefix, pad=PAD):
        W = _weights(run, ids)
        real = ids.ne(pad)
        bad = (~real[:, None, :]) & real[:, :, None]                           # (n, L, L)
        seen = W[bad].nan_to_num(0.0)
        leak = seen.abs().max().item() if seen.numel() else 0.0
        require(leak <= ZERO, f"on {where} a real token's query gives weight {leak:.3g} to padded keys; mask keys "
                              "whose id is pad_id for real queries")
    every_length(results, plan, one, stress=True)
    one("other_pad_id", results.get("other_pad_id"), _ids(plan, "other_pad"), f"windows padded with id {OTHER_PAD} by a model built with "
                                                 f"pad_id={OTHER_PAD}", "wp", OTHER_PAD)


@_unless_random("the effect of permuting tokens")
def test_equivariance(results, plan):
    """Permuting earlier tokens: last-position logits unchanged without position rows, changed with them."""
    plain = results.get("permuted_no_positions")
    require(close(plain["out0"], plain["out1"]),
            "with zero position rows, permuting the earlier tokens changed the last position's logits: "
            "attention over a set of keys must not depend on their order")
    pos = results.get("permuted")
    require(not torch.allclose(pos["out0"], pos["out1"], atol=1e-3),
            "with position rows, permuting the earlier tokens left the logits unchanged: each slot t must add its "
            "own position row t to its token row, and the scores must depend on content")


def test_parameter_count(results, plan):
    """The contract: 331,132 parameters at the seed's sizes (vocabulary 1,500, context 12), every one used by
    forward, and the one head built by hand: no library attention module, and no fused attention ran (the
    child's operator watch) or is named (the source); and the model runs on the device it is moved to (the
    notebook trains on DEVICE): measured on the meta device, where only a device mismatch counts."""
    meta = results.get("inspect").meta
    n = meta.get("seed_size_parameters")
    call = f"TeachingAttentionLM({SEED_SIZES['vocab_size']}, {SEED_SIZES['context_len']})"
    wrong = default_shape_errors(meta.get("seed_size_shapes") or {})
    require(not wrong, f"{call}, built as the seed builds it, gives {'; '.join(wrong)}: the defaults must be "
                       + ", ".join(f"{k}={v}" for k, v in DEFAULTS.items()))
    require(n == SEED_PARAMS, f"{call} has {n:,} trainable parameters, expected "
                              f"{SEED_PARAMS:,}: check biases (none on W_Q, W_K, W_V, W_O) and layer sizes")
    require(meta.get("default_pad_id") in (None, DEFAULTS["pad_id"])          # None: no pad_id attribute to read
            and meta.get("default_padding_idx") == DEFAULTS["pad_id"],
            f"{call} has pad_id {meta.get('default_pad_id')} and token_embedding padding_idx "
            f"{meta.get('default_padding_idx')}: the default pad_id is {DEFAULTS['pad_id']}")
    require(meta.get("padding_idx") == PAD, "token_embedding must be nn.Embedding(..., padding_idx=pad_id)")
    require(meta.get("position_padding_idx") is None,
            f"position_embedding has padding_idx={meta.get('position_padding_idx')}: the row of that slot would "
            "never train (padding_idx is about token ids, not positions); nn.Embedding(context_len, d_model)")
    banned = {"MultiheadAttention", "LayerNorm"} & set(meta.get("modules", []))
    require(not banned, f"the model uses {', '.join(sorted(banned))}, which this assignment builds by hand")
    require_own_attention(results, "your model", "the scores, masks and softmax", "the model")
    on_meta = results.results.get("meta")            # an error there (a timeout) is no finding about devices
    moved = ((on_meta[0].get("meta") or {}).get("device_mismatch") if on_meta and not on_meta[0].get("error")
             else None)
    require(not moved, f"called once, then moved to another device (model.to(device)), forward_details or forward "
                       f"failed with {moved}: a tensor made on the CPU inside them (torch.ones, torch.triu or "
                       "torch.arange without device=ids.device), or one kept in a plain attribute from an earlier "
                       "call, does not move with the model; make it on ids.device (the notebook trains on DEVICE)")


@_unless_random("the scaling")
def test_scaling(results, plan):
    """Scores are divided by sqrt(d_k), visible because d_k != d_model, on a model whose d_k is 9 (where d_k / 2 and a
    constant 2 are not sqrt(d_k), as they are at the other runs' d_k = 4). Measured against the scores of the model's
    own X (forward_details()['X']) under the judge's W_Q and W_K: a mistake in X (position rows, say) is the
    business of the checks that see X, not of the temperature."""
    sd = state_dict(plan, "s")
    ids = _ids(plan, "unpadded")
    X = _shape(results.get("scaling")["d_X"], (*ids.shape, sd["W_Q.weight"].shape[1]), "forward_details()['X']")
    Q, K = X.double() @ sd["W_Q.weight"].double().T, X.double() @ sd["W_K.weight"].double().T
    S = Q @ K.transpose(-2, -1)                                                # (B, T, T) unscaled
    require_scale(_weights(results.get("scaling"), ids), S, reference.causal_mask(T).expand(B, -1, -1), D_K_SCALING,
                  "d_k")


def _gradients_are_this_checks(results, plan) -> bool:
    """Whether the gradients' agreement is this check's to judge: not when no gradient, a NaN or a zero one reaches
    a parameter (test_finite_gradients'), nor when the position table has padding_idx (test_parameter_count's: that
    row's gradient is zeroed), so one slip loses the one check that names it."""
    try:
        test_finite_gradients(results, plan)
    except CheckFailed:
        return False
    return meta_of(results, "inspect").get("position_padding_idx") is None      # {} when the inspect run failed


@_unless_random("agreement with a correct model")
def test_reference_agreement(results, plan):
    """Given the same weights, logits and weights agree with a correct model (real query rows), and so do the
    messages and updates the contract returns (weights V at width d_v, then W_O: applied the other way round the
    contextual rows agree by linearity, the messages do not); in eval mode, the gradients of a cross-entropy loss
    on forward() agree too (a residual of X.detach() computes the right values and cuts the embeddings' path)."""
    def one(name, run, ids, where, prefix):
        ref = reference.lm_forward_details(ids, state_dict(plan, prefix), PAD)
        real = ids.ne(PAD)
        for key in ("weights", "messages", "updates", "contextual", "logits_all"):
            if key in ("messages", "updates") and f"d_{key}" not in getattr(run, "arrays", run):
                continue                                 # a run that carries the checked keys alone (the calls)
            got = run[f"d_{key}"]
            require(got.shape == ref[key].shape, f"on {where} forward_details()['{key}'] has shape "
                                                 f"{tuple(got.shape)}, expected {tuple(ref[key].shape)}")
            ok = close(got[real], ref[key][real])
            err = (got[real] - ref[key][real]).abs().max().item()
            require(ok, f"on {where}, given the same weights, forward_details()['{key}'] differs from "
                        f"a correct model by up to {err:.3g} on real tokens")
        got = run["forward"]
        require(got.shape == ref["logits"].shape and close(got, ref["logits"]),
                f"on {where} forward() differs from a correct model given the same weights")
        # X on every slot, padding slots included, as the contract defines it (blind set 13's m15: position rows
        # zeroed at the padding slots changed no real row, and kept every point)
        X = getattr(run, "arrays", run).get("d_X")
        if X is not None and not (X.shape == ref["X"].shape and close(X, ref["X"])):
            at_pad = X.shape == ref["X"].shape and close(X[real], ref["X"][real])     # the real slots right
            raise CheckFailed(f"on {where}, given the same weights, forward_details()['X'] differs from "
                              "token_embedding(ids) + position_embedding(0..T-1)" + (
                                  " at a padding slot: slot t gets position row t whatever its token" if at_pad else ""))
    every_length(results, plan, one, stress=True)
    off = grads_off(results, plan) if _gradients_are_this_checks(results, plan) else []
    require(not off, f"given the same weights, forward() agrees with a correct model but the gradient of a "
                     f"cross-entropy loss on it does not, for {', '.join(off)}: part of forward's computation is cut "
                     "from the graph (.detach(), .data or torch.no_grad()) or the values come from another path "
                     "than the one the gradient takes")
