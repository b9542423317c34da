"""A library attention is caught by what ran, however it is spelt or hidden.

Each corpus variant (tests/corpus, VARIANTS) is a correct submission that lets torch compute the
attention: the aten math kernel through torch.ops, a getattr-assembled F.scaled_dot_product_attention,
F.multi_head_attention_forward, an nn.MultiheadAttention built inside forward, and attempts to blind
the grader around such a call (popping the torch-function modes, stopping or restarting the profiler).
Before the child's operator watch (autograder/op_watch.py) every one of them kept full marks, since a
scan of the source saw no banned name. Now each loses exactly the contract check (interface for Head,
parameter_count for the LM) with a plain sentence, and every other check keeps its verdict; correct
submissions keep every point with an intact watch on every watched experiment.
"""
import pytest
import torch

from autograder import config, sandbox
from autograder.diagnosis import NO_PATTERN
from autograder.judge import run_submission
from tests.corpus import causal_head as head_corpus, attention_lm as lm_corpus, submissions
from tests.corpus.checks import failed

CORPORA = {"causal_head": head_corpus, "attention_lm": lm_corpus}
CONTRACT = {"causal_head": "interface", "attention_lm": "parameter_count"}
FUSED = {"causal_head": "banned_fused_call", "attention_lm": "library_attention"}
RAN = "ran torch's fused attention ("
BLINDED = "your code switched off the grader's operator recording"
HIDDEN = ("getattr_concat", "pop_modes_around_sdpa", "pop_modes_around_mha", "stop_profiler_and_pop_modes",
          "restart_profiler")           # no banned name in the source (aten_math_op's the text scan sees too)

# the variants that hand attention to torch (VARIANTS also holds other spellings of catalogued mistakes)
CASES = [(a, n) for a, c in CORPORA.items() for n, v in c.VARIANTS.items() if v.diagnosis in (None, FUSED[a])]


@pytest.fixture(scope="module")
def results_by(head_results, lm_results):
    return {"causal_head": head_results, "attention_lm": lm_results}


def _contract(result, assignment):
    return next(c for c in result["checks"] if c["id"] == CONTRACT[assignment])


@pytest.mark.parametrize("assignment,name", CASES)
def test_hidden_fused_attention_loses_exactly_the_contract_check(results_by, assignment, name):
    variant = CORPORA[assignment].VARIANTS[name]
    r = results_by[assignment][f"variant:{name}"]
    assert failed(r) == variant.fails == {CONTRACT[assignment]}, (variant.what, failed(r))
    cfg = config.load(assignment)
    assert r["score"] == cfg.max_score - sum(c.points for c in cfg.checks if c.id in variant.fails)
    message = _contract(r, assignment)["message"]
    if variant.diagnosis is None:                     # nothing fused was seen: only the blinding
        assert message.startswith(BLINDED), message
    else:
        assert RAN in message and "by hand" in message, message


@pytest.mark.parametrize("assignment,name", CASES)
def test_hidden_fused_attention_is_named_when_it_was_seen(results_by, assignment, name):
    variant = CORPORA[assignment].VARIANTS[name]
    contract = _contract(results_by[assignment][f"variant:{name}"], assignment)
    if variant.diagnosis is None:
        assert contract["diagnosis"] == NO_PATTERN and contract["diagnosis_id"] is None
    else:
        assert contract["diagnosis_id"] == variant.diagnosis == FUSED[assignment]


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_the_plain_library_call_is_a_named_mistake(results_by, assignment):
    r = results_by[assignment][f"mistake:{FUSED[assignment]}"]
    contract = _contract(r, assignment)
    assert failed(r) == {CONTRACT[assignment]} and RAN in contract["message"], contract["message"]
    assert "(scaled_dot_product_attention)" in contract["message"]


def _ops(assignment, name):
    """The operator records of every experiment of one corpus submission, by experiment name."""
    results, plan, _, _ = run_submission(submissions(assignment)[name], assignment)
    return {e["name"]: results.results[e["name"]][0].get("ops") for e in plan["experiments"]}, plan, results


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_the_watch_is_what_sees_them(assignment):
    """The hidden variants name nothing a text scan could find; the child's record names what ran, on every
    watched experiment."""
    from autograder.causal_head.evidence import fused_in_source
    expect = {"aten_math_op": "aten::_scaled_dot_product_attention_math",
              "getattr_concat": "aten::scaled_dot_product_attention",
              "pop_modes_around_sdpa": "aten::scaled_dot_product_attention",        # the profiler, modes popped
              "pop_modes_around_mha": "multi_head_attention_forward"}              # the helper's event
    for name, op in expect.items():
        ops, plan, results = _ops(assignment, f"variant:{name}")
        assert (fused_in_source(results) == []) == (name in HIDDEN), name
        watched = [e["name"] for e in plan["experiments"] if e.get("watch", True)]
        assert all(ops[n]["intact"] and op in ops[n]["fused"] for n in watched), (name, ops)


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_a_stopped_or_restarted_recording_is_not_intact(assignment):
    for name in ("stop_profiler_and_pop_modes", "restart_profiler"):
        ops, plan, _ = _ops(assignment, f"variant:{name}")
        forward = [e["name"] for e in plan["experiments"] if e.get("watch", True)]
        assert forward and all(ops[n]["intact"] is False for n in forward), (name, ops)
    ops, _, _ = _ops(assignment, "variant:stop_profiler_and_pop_modes")
    assert not any(o["fused"] for o in ops.values() if o), ops       # blinded: only the tampering shows


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_correct_submissions_keep_every_point_with_an_intact_watch(results_by, assignment):
    names = ["solution"] + [f"alternative:{n}" for n in CORPORA[assignment].ALTERNATIVES]
    for name in names:
        r = results_by[assignment][name]
        assert r["score"] == r["max_score"] and failed(r) == set(), (name, failed(r))
    for name in names:
        ops, plan, _ = _ops(assignment, name)
        for e in plan["experiments"]:
            if e.get("watch", True):
                assert ops[e["name"]] == {"fused": [], "intact": True}, (name, e["name"], ops[e["name"]])
            else:
                assert ops[e["name"]] is None, (name, e["name"])


def test_every_experiment_that_runs_forward_is_watched():
    from autograder.attention_lm.plan import make_plan as lm_plan
    from autograder.causal_head.plan import make_plan as head_plan
    head = {e["name"] for e in head_plan()["experiments"] if not e.get("watch", True)}
    lm = {e["name"] for e in lm_plan()["experiments"] if not e.get("watch", True)}
    assert head == {"inspect"} and lm == {"overfit"}     # __init__ only; 220 training steps of a watched forward


# ---- the watch itself, in this process: what each witness sees, and what it leaves behind -------------------

@pytest.fixture(scope="module")
def watch():
    """The fragment loaded here as the child loads it; torch's helper it wraps is put back afterwards."""
    fragment, helper = {"__name__": "op_watch"}, torch.nn.functional._mha_shape_check
    exec(compile((sandbox.HERE / "op_watch.py").read_text(), "op_watch.py", "exec"), fragment)
    fragment["prime_op_watch"](torch)
    yield fragment["watch_ops"]
    torch.nn.functional._mha_shape_check = helper


def _seen(watch, fn):
    with watch(torch) as seen:
        fn()
    return seen


Q = torch.randn(2, 6, 4, requires_grad=True)


def _mha(q=Q):
    e = torch.eye(4)
    return torch.nn.functional.multi_head_attention_forward(
        q.transpose(0, 1), q.transpose(0, 1), q.transpose(0, 1), 4, 1, None, None, None, None, False, 0.0, e, None,
        use_separate_proj_weight=True, q_proj_weight=e, k_proj_weight=e, v_proj_weight=e)


def _mha_without_torch_functions():
    with torch._C.DisableTorchFunction():            # no mode sees it: the helper's event still does
        return _mha()


def _hand(q=Q):
    s = (q @ q.transpose(-2, -1) / 2).masked_fill(torch.ones(6, 6).tril() == 0, float("-inf"))
    return s.softmax(-1) @ q


def _state():
    return (torch._C._autograd._profiler_enabled(), torch._C._len_torch_function_stack(),
            torch._C._get_torch_function_state(), torch.nn.functional._mha_shape_check.__name__)


def test_watch_sees_fused_calls_by_any_route(watch):
    F = torch.nn.functional
    m = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    routes = {
        "sdpa": (lambda: F.scaled_dot_product_attention(Q, Q, Q, is_causal=True), "aten::scaled_dot_product_attention"),
        "getattr": (lambda: getattr(F, "scaled_dot_" + "product_attention")(Q, Q, Q), "scaled_dot_product_attention"),
        "torch.ops": (lambda: torch.ops.aten._scaled_dot_product_attention_math(Q, Q, Q),
                      "aten::_scaled_dot_product_attention_math"),
        "mha_forward": (_mha, "multi_head_attention_forward"),
        "module": (lambda: m(Q, Q, Q), "multi_head_attention_forward"),
        "no_modes": (_mha_without_torch_functions, "multi_head_attention_forward"),
    }
    before = _state()
    for what, (fn, op) in routes.items():
        seen = _seen(watch, fn)
        assert op in seen.fused and seen.intact, (what, seen.fused, seen.intact)
        assert _state() == before, what                        # nothing of the watch stays behind


def test_watch_is_silent_and_intact_for_hand_written_attention(watch):
    def work():
        with torch.autograd.profiler.record_function("my_attention"):    # a student's own label is no operator
            _hand().sum().backward()
        with torch.device("cpu"):                                        # a mode of its own, popped in time
            torch.vmap(lambda x: (x @ x.T).softmax(-1) @ x)(Q.detach())
    seen = _seen(watch, work)
    assert seen.fused == [] and seen.intact


def test_watch_notices_the_recording_switched_off(watch):
    ag = torch._C._autograd

    def stop():
        for f in (ag._disable_profiler, ag._disable_profiler_legacy):
            try:
                f()
            except RuntimeError:
                pass

    def leave_modes_off():
        torch._C.DisableTorchFunction().__enter__()

    def unwrap_helper():
        torch.nn.functional._mha_shape_check = lambda *a, **k: True

    for what, fn in {"profiler stopped": stop, "record function off": lambda: ag._enable_record_function(False),
                     "callbacks cleared": ag._clear_callbacks, "modes left off": leave_modes_off,
                     "helper unwrapped": unwrap_helper}.items():
        try:
            seen = _seen(watch, fn)
        finally:
            torch._C._set_torch_function_state(torch._C._TorchFunctionState.ENABLED)
            ag._enable_record_function(True)
        assert not seen.intact, what
        assert torch.nn.functional._mha_shape_check.__name__ == "sentinel", what     # put back


def test_watch_accuses_nobody_when_it_cannot_start(watch):
    """A recording this thread already runs (only a submission could have started one) is not ours to judge:
    the mode still witnesses, and the block's code sees its own profiler as it left it."""
    prof = torch.autograd.profiler.profile()
    prof.__enter__()
    try:
        seen = _seen(watch, lambda: getattr(torch.nn.functional, "scaled_dot_" + "product_attention")(Q, Q, Q))
        assert seen.intact and seen.fused == ["scaled_dot_product_attention"]
        assert torch._C._autograd._profiler_enabled()
    finally:
        prof.__exit__(None, None, None)


def test_watch_lets_the_block_raise_and_cleans_up(watch):
    before = _state()
    with pytest.raises(ZeroDivisionError):
        with watch(torch):
            _hand()
            1 / 0
    assert _state() == before
