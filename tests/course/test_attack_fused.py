"""A library attention is caught by what ran, however it is spelt or hidden.

Each corpus variant (tests/corpus, VARIANTS) is a correct submission that lets torch compute the
attention: the aten math kernel through torch.ops, a getattr-assembled F.scaled_dot_product_attention,
F.multi_head_attention_forward, an nn.MultiheadAttention built inside forward, and attempts to blind
the grader around such a call (popping the torch-function modes, stopping or restarting the profiler,
which blinded the watch while it was a recording; unregistering its stand-ins through the child
program's globals). Before the child's operator watch (attnkit/isolation/op_watch.py) every one of them kept
full marks, since a scan of the source saw no banned name. Now each loses exactly the contract check
(interface for Head, parameter_count for the LM) with a plain sentence, and every other check keeps its
verdict; correct submissions keep every point with an intact watch on every watched experiment.
"""
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnkit.engine import config
from attnkit.isolation import sandbox
from attnkit.engine.diagnosis import NO_PATTERN
from attnkit.mutants import submissions
from autograder.causal_head import mutants as head_mutants
from autograder.attention_lm import mutants as lm_mutants
from tests.corpus_checks import failed
from autograder.attention_lm.plan import make_plan as lm_plan
from autograder.causal_head.plan import make_plan as head_plan

CORPORA = {"causal_head": head_mutants, "attention_lm": lm_mutants}
make_plan = {"causal_head": head_plan, "attention_lm": lm_plan}
CONTRACT = {"causal_head": "interface", "attention_lm": "parameter_count"}
FUSED = {"causal_head": "banned_fused_call", "attention_lm": "library_attention"}
RAN = "ran torch's fused attention ("
BLINDED = "your code changed torch's registered attention kernels"
HIDDEN = ("getattr_concat", "pop_modes_around_sdpa", "pop_modes_around_mha", "stop_profiler_and_pop_modes",
          "restart_profiler", "unregister_stand_ins")           # no banned name in the source (aten_math_op's the text scan sees too)

# the variants that hand attention to torch, or blind its watch (VARIANTS also holds other spellings of catalogued
# mistakes, and mistakes the catalogue does not name)
CASES = [(a, n) for a, c in CORPORA.items() for n, v in c.VARIANTS.items() if v.diagnosis == FUSED[a] or n in HIDDEN]


@pytest.fixture(scope="session")       # not per module: the module's tests may be spread over the workers
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
        assert contract["diagnosis"].startswith(NO_PATTERN) and contract["diagnosis_id"] is None
    else:
        assert contract["diagnosis_id"] == variant.diagnosis == FUSED[assignment]


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_the_plain_library_call_is_a_named_mistake(results_by, assignment):
    r = results_by[assignment][f"mistake:{FUSED[assignment]}"]
    contract = _contract(r, assignment)
    assert failed(r) == {CONTRACT[assignment]} and RAN in contract["message"], contract["message"]
    assert "(scaled_dot_product_attention)" in contract["message"]


@pytest.fixture(scope="session")
def ops_by(graded_ops):
    """assignment -> (name -> experiment -> its operator record, the plan): the records the child kept on the very
    run ``results_by`` judged (tests/conftest.py's graded corpus), not a second run of each submission."""
    plans = {a: make_plan[a]() for a in CORPORA}           # the experiments' names and watch flags are the draw's own
    return lambda assignment: (graded_ops(assignment), plans[assignment])


def _ops(ops_by, assignment, name):
    """The operator records of every experiment of one corpus submission, by experiment name; its plan; what the
    source names (``.code``, read in the parse's limits as the judge reads it: no child is run for it)."""
    from attnkit.isolation import untrusted
    records, plan = ops_by(assignment)
    code = untrusted.student_code(submissions(assignment)[name], config.load(assignment).contract.name)
    assert records[name] is not None, name
    return records[name], plan, SimpleNamespace(code=code)


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_the_watch_is_what_sees_them(ops_by, assignment):
    """The hidden variants name nothing a text scan could find; the child's record names what ran, on every
    watched experiment, the profiler stopped or restarted and the torch-function modes popped included."""
    from attnkit.toolkit.evidence import fused_in_source
    expect = {"aten_math_op": "aten::_scaled_dot_product_attention_math",
              "getattr_concat": "aten::scaled_dot_product_attention",
              "pop_modes_around_sdpa": "aten::scaled_dot_product_attention",
              "pop_modes_around_mha": "multi_head_attention_forward",              # the helper's stand-in
              "stop_profiler_and_pop_modes": "aten::scaled_dot_product_attention",
              "restart_profiler": "aten::scaled_dot_product_attention"}
    for name, op in expect.items():
        ops, plan, results = _ops(ops_by, assignment, f"variant:{name}")
        assert (fused_in_source(results) == []) == (name in HIDDEN), name
        watched = [e["name"] for e in plan["experiments"] if e.get("watch", True)]
        assert all(ops[n]["intact"] and op in ops[n]["fused"] for n in watched), (name, ops)


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_stand_ins_taken_away_leave_the_watch_not_intact(ops_by, assignment):
    ops, plan, _ = _ops(ops_by, assignment, "variant:unregister_stand_ins")
    forward = [e["name"] for e in plan["experiments"] if e.get("watch", True)]
    assert forward and all(ops[n]["intact"] is False for n in forward), ops
    assert not any(o["fused"] for o in ops.values() if o), ops       # blinded: only the tampering shows


@pytest.mark.parametrize("assignment", sorted(CORPORA))
def test_correct_submissions_keep_every_point_with_an_intact_watch(results_by, ops_by, assignment):
    names = ["solution"] + [f"alternative:{n}" for n in CORPORA[assignment].ALTERNATIVES]
    for name in names:
        r = results_by[assignment][name]
        assert r["score"] == r["max_score"] and failed(r) == set(), (name, failed(r))
    for name in names:
        ops, plan, _ = _ops(ops_by, assignment, name)
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
    assert head == {"inspect"} and lm == set()           # __init__ only; the LM's training steps too


# ---- the watch itself, in this process: what it sees, what it notices, what it leaves behind -----------------

def _load_watch():
    fragment = {"__name__": "op_watch"}
    exec(compile((Path(sandbox.__file__).parent / "op_watch.py").read_text(), "op_watch.py", "exec"), fragment)
    fragment["prime_op_watch"](torch)
    return fragment


def _python_entry_points():
    """torch's Python attention entry points and its attention operators' Python kernels, as they are now."""
    import importlib
    flex = importlib.import_module("torch._higher_order_ops.flex_attention")      # the package's attribute is the
    quantizable = importlib.import_module("torch.ao.nn.quantizable.modules.activation")  # operator, not the module
    F, mha = torch.nn.functional, quantizable.MultiheadAttention
    saved = [(F, "multi_head_attention_forward", F.multi_head_attention_forward),
             (mha, "_forward_impl", mha.__dict__["_forward_impl"])]
    saved += [(flex, n, getattr(flex, n)) for n in ("math_attention", "sdpa_dense", "sdpa_dense_backward")]
    hops = {n: dict(h.py_kernels) for n, h in torch._ops._higher_order_ops.items() if "attention" in n}
    return saved, hops


def _put_back(state):
    saved, hops = state
    for owner, attr, value in saved:
        setattr(owner, attr, value)
    for n, kernels in hops.items():
        torch._ops._higher_order_ops[n].py_kernels.clear()
        torch._ops._higher_order_ops[n].py_kernels.update(kernels)
        torch._ops._higher_order_ops[n]._dispatch_cache.clear()


@pytest.fixture(scope="module")
def fragment():
    """The fragment loaded here as the child loads it; its stand-ins are taken away afterwards, so the rest
    of this process runs torch as before."""
    before = _python_entry_points()
    loaded = [_load_watch()]
    yield loaded
    loaded[0]["_ow_torch"]["lib"]._destroy()
    _put_back(before)


@pytest.fixture
def watch(fragment):
    return fragment[0]["watch_ops"]


def _seen(watch, fn):
    with watch(torch) as seen:
        fn()
    return seen


Q = torch.randn(2, 6, 4, requires_grad=True)
D = Q.detach()


def _mha(q=Q):
    e = torch.eye(4)
    return torch.nn.functional.multi_head_attention_forward(
        q.transpose(0, 1), q.transpose(0, 1), q.transpose(0, 1), 4, 1, None, None, None, None, False, 0.0, e, None,
        use_separate_proj_weight=True, q_proj_weight=e, k_proj_weight=e, v_proj_weight=e)


def _without_torch_functions(fn):
    with torch._C.DisableTorchFunction():            # no mode sees it: the helper's stand-in still does
        return fn()


def _hand(q=Q):
    s = (q @ q.transpose(-2, -1) / 2).masked_fill(torch.ones(6, 6).tril() == 0, float("-inf"))
    return s.softmax(-1) @ q


def _state():
    return (torch._C._autograd._profiler_enabled(), torch._C._len_torch_function_stack(),
            torch._C._get_torch_function_state(), torch.nn.functional.multi_head_attention_forward.__code__.co_name)


def _flex(q=Q):
    from torch.nn.attention.flex_attention import flex_attention
    with torch.no_grad():
        return flex_attention(q[:, None].detach(), q[:, None].detach(), q[:, None].detach())


def _flex_math(q=Q):
    import importlib
    flex, s = importlib.import_module("torch._higher_order_ops.flex_attention"), q[:, None].detach()
    every = lambda b, h, i, j: i >= 0  # noqa: E731 - a mask_mod that keeps every pair
    return flex.math_attention(s, s, s, lambda score, *_: score, (6, 6, every), 0.5, {"PRESCALE_QK": False})


def _mha_copied(q=Q):
    """torch's F.multi_head_attention_forward rebuilt from its code with globals of its own."""
    import types
    f = torch.nn.functional.multi_head_attention_forward
    g = dict(f.__globals__, _mha_shape_check=lambda query, *a, **k: query.dim() == 3)
    h = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    h.__kwdefaults__ = f.__kwdefaults__
    e = torch.eye(4)
    return h(q.transpose(0, 1), q.transpose(0, 1), q.transpose(0, 1), 4, 1, None, None, None, None, False, 0.0, e,
             None, use_separate_proj_weight=True, q_proj_weight=e, k_proj_weight=e, v_proj_weight=e)


def _quantizable(q=Q):
    import torch.ao.nn.quantizable as qz
    return getattr(qz, "Multihead" + "Attention")(4, 1, bias=False, batch_first=True)(q, q, q, need_weights=True)


SDPA, MATH = "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math"
FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


def test_watch_sees_fused_calls_by_any_route(watch):
    F, aten = torch.nn.functional, torch.ops.aten
    m = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    fast = torch.nn.MultiheadAttention(4, 1, batch_first=True).eval()
    layer = torch.nn.TransformerEncoderLayer(4, 1, 8, batch_first=True).eval()
    inference = lambda fn: lambda: torch.inference_mode()(fn)()  # noqa: E731
    routes = {
        "sdpa": (lambda: F.scaled_dot_product_attention(Q, Q, Q, is_causal=True).sum().backward(), SDPA),
        "getattr": (lambda: getattr(F, "scaled_dot_" + "product_attention")(Q, Q, Q), SDPA),
        "torch.ops": (lambda: aten._scaled_dot_product_attention_math(Q, Q, Q)[0].sum().backward(), MATH),
        "decompose": (lambda: aten._scaled_dot_product_attention_math.default.decompose(Q, Q, Q), MATH),
        "flash kernel": (lambda: aten._scaled_dot_product_flash_attention_for_cpu(Q[None], Q[None], Q[None]), FLASH),
        "no modes": (lambda: _without_torch_functions(lambda: F.scaled_dot_product_attention(Q, Q, Q)), SDPA),
        "inference mode": (inference(lambda: F.scaled_dot_product_attention(D, D, D)), SDPA),
        "vmap": (lambda: torch.vmap(lambda q: aten._scaled_dot_product_attention_math(q, q, q)[0])(D), MATH),
        "func.grad": (lambda: torch.func.grad(lambda q: F.scaled_dot_product_attention(q, q, q).sum())(D), SDPA),
        "autocast": (lambda: torch.autocast("cpu")(lambda: F.scaled_dot_product_attention(Q, Q, Q))(), SDPA),
        "jit trace": (lambda: torch.jit.trace(lambda q: F.scaled_dot_product_attention(q, q, q), (D,))(D), SDPA),
        "mha_forward": (_mha, "multi_head_attention_forward"),
        "mha no modes": (lambda: _without_torch_functions(_mha), "multi_head_attention_forward"),
        "module": (lambda: m(Q, Q, Q), "multi_head_attention_forward"),
        "mha_forward copied": (_mha_copied, "multi_head_attention_forward"),
        "quantizable module": (_quantizable, "MultiheadAttention"),
        "flex_attention": (_flex, "flex_attention"),
        "flex's math kernel": (_flex_math, "flex_attention"),
        "module fast path": (inference(lambda: fast(D, D, D, need_weights=False)), FLASH),
        "encoder fast path": (inference(lambda: layer(D)), FLASH),
    }
    before = _state()
    for what, (fn, op) in routes.items():
        seen = _seen(watch, fn)
        assert op in seen.fused and seen.intact, (what, seen.fused, seen.intact)
        assert _state() == before, what                        # nothing of the watch stays behind


def test_results_and_gradients_are_torchs_own(fragment):
    """A stand-in hands each call to the kernel it replaced: values and gradients equal an unwatched run."""
    q = Q.detach().clone().requires_grad_(True)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    out.sum().backward()
    fragment[0]["_ow_torch"]["lib"]._destroy()                 # torch's own kernels again, for the oracle
    try:
        r = Q.detach().clone().requires_grad_(True)
        ref = torch.nn.functional.scaled_dot_product_attention(r, r, r, is_causal=True)
        ref.sum().backward()
    finally:
        fragment[0]["_ow_torch"].clear()
        fragment[0] = _load_watch()
    assert torch.equal(out, ref) and torch.equal(q.grad, r.grad)


ELSEWHERE = {   # torch's attention computed out of the watch's sight: in another process or thread
    "fork": "import os\nif os.fork() == 0:\n    os._exit(0)",
    "fresh interpreter": "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import torch'])",
    "multiprocessing": "import multiprocessing as mp\nmp.get_context('fork').Pool(1).close()",
    "thread": "import threading\nthreading.Thread(target=lambda: None).start()",
}


@pytest.mark.parametrize("how", sorted(ELSEWHERE))
def test_no_other_process_or_thread_can_do_the_work(how):
    """A forward that starts any other process or thread (where a fused attention would run unwatched)
    cannot: each check that ran it fails with a plain sentence, and nothing outlives the grading."""
    from attnkit.engine.judge import grade
    nb = submissions("causal_head")["solution"]
    cell = next(c for c in nb.cells if "class Head" in c.source)
    start = "        B, T, d = x.shape"
    cell.source = cell.source.replace(start, "\n".join("        " + ln for ln in ELSEWHERE[how].splitlines())
                                      + "\n" + start)
    r = grade(nb, "causal_head")
    lost = [c for c in r["checks"] if not c["passed"]]
    assert r["score"] <= 2 and lost, failed(r)       # what never calls forward (mask_buffer) may pass
    assert all("tried to start another process or thread" in c["message"] for c in lost), [c["message"] for c in lost]


LATER = '''class _Later(torch.Tensor):
    """A tensor that runs torch's attention only when it is read (the judge's numpy), as a deferred
    subclass computing its whole value then would."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.numpy:
            x = torch.ones(1, 2, 4)
            getattr(F, "scaled_dot_" + "product_attention")(x, x, x)
        return super().__torch_function__(func, types, args, kwargs)       # stays a _Later through .to, .detach


'''


def test_work_put_off_until_the_judge_reads_is_watched():
    """What a submission's values compute when the judge reads them runs inside the watched block."""
    from attnkit.engine.judge import grade
    nb = submissions("causal_head")["solution"]
    cell = next(c for c in nb.cells if "class Head" in c.source)
    cell.source = LATER + cell.source.replace("return A @ v ", "return (A @ v).as_subclass(_Later) ")
    r = grade(nb, "causal_head")
    assert failed(r) == {"interface"}, failed(r)
    assert RAN in _contract(r, "causal_head")["message"]


def test_a_torchscript_helper_loses_nothing():
    """TorchScript reads a function's source: the submission's source is findable (linecache) in the child."""
    from attnkit.engine.judge import grade
    nb = submissions("causal_head")["solution"]
    cell = next(c for c in nb.cells if "class Head" in c.source)
    cell.source = ("@torch.jit.script\ndef scaled(s: torch.Tensor, d: int) -> torch.Tensor:\n"
                   "    return s / d ** 0.5\n\n\n" + cell.source.replace(
                       "scores = q @ k.transpose(-2, -1) / k.shape[-1]**0.5", "scores = scaled(q @ k.transpose(-2, -1), k.shape[-1])"))
    r = grade(nb, "causal_head")
    assert r["score"] == r["max_score"], failed(r)


def test_a_helper_of_the_students_own_named_like_the_library_loses_nothing():
    """A hand-written head keeps every point beside a helper of its own called scaled_dot_product_attention
    and an uncalled one comparing with torch's: the text scan names, only what runs is judged."""
    from attnkit.engine.judge import grade
    nb = submissions("causal_head")["solution"]
    cell = next(c for c in nb.cells if "class Head" in c.source)
    own = ("def scaled_dot_product_attention(q, k, v):\n"
           "    return F.softmax(q @ k.transpose(-2, -1) / k.shape[-1]**0.5, dim=-1) @ v\n\n\n"
           "def compare_with_torch(head, x):           # never called in grading: the habit of checking by hand\n"
           "    return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)\n\n\n")
    cell.source = own + cell.source.replace("A = F.softmax(scores, dim=-1)", "A = F.softmax(scores, dim=-1)\n"
                                            "        _ = scaled_dot_product_attention(q, k, v)")
    r = grade(nb, "causal_head")
    assert r["score"] == r["max_score"], failed(r)


def test_only_fused_attention_operators_get_a_stand_in(fragment):
    """Nothing is paid per operator: every other operator keeps its kernels, so hand-written attention
    dispatches as it does without the watch."""
    t = fragment[0]
    kernels = t["_ow_kernels"](torch)
    assert kernels and all(t["_ow_banned"](op) for op, *_ in kernels)
    assert {SDPA, MATH, FLASH} <= {op.split(".")[0] for op, *_ in kernels}
    for op in ("aten::softmax", "aten::matmul", "aten::bmm", "aten::masked_fill.Scalar", "aten::linear"):
        assert "op_watch.py" not in torch._C._dispatch_dump(op), op


def test_watch_is_silent_and_intact_for_hand_written_attention(watch):
    def work():
        with torch.autograd.profiler.record_function("my_attention"):    # a student's own label is no operator
            _hand().sum().backward()
        with torch.device("cpu"):                                        # a mode of its own, popped in time
            torch.vmap(lambda x: (x @ x.T).softmax(-1) @ x)(D)
    seen = _seen(watch, work)
    assert seen.fused == [] and seen.intact


def test_what_blinded_the_recording_blinds_the_stand_ins_no_more(watch):
    ag = torch._C._autograd

    def stop():
        for f in (ag._disable_profiler, ag._disable_profiler_legacy):
            try:
                f()
            except RuntimeError:
                pass

    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(Q, Q, Q)  # noqa: E731
    for what, fn in {"profiler stopped": stop, "record function off": lambda: ag._enable_record_function(False),
                     "callbacks cleared": ag._clear_callbacks,
                     "modes left off": lambda: torch._C.DisableTorchFunction().__enter__()}.items():
        try:
            seen = _seen(watch, lambda: (fn(), sdpa()))
        finally:
            torch._C._set_torch_function_state(torch._C._TorchFunctionState.ENABLED)
            ag._enable_record_function(True)
        assert seen.intact and SDPA in seen.fused, (what, seen.fused)


def test_watch_notices_its_stand_ins_taken_away(fragment):
    def unregister():
        fragment[0]["_ow_torch"]["lib"]._destroy()
        torch.nn.functional.scaled_dot_product_attention(Q, Q, Q)

    covering = []

    def cover():                                                 # a registration of the block's own over one
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("_scaled_dot_product_flash_attention_for_cpu", lambda *a, **k: None, "CPU")
        covering.append(lib)

    def unwrap_helper():
        torch.nn.functional.multi_head_attention_forward = lambda *a, **k: None

    for what, fn in {"unregistered": unregister, "covered": cover, "helper unwrapped": unwrap_helper}.items():
        try:
            seen = _seen(fragment[0]["watch_ops"], fn)
        finally:
            for lib in covering:
                lib._destroy()
            if what == "unregistered":
                fragment[0]["_ow_torch"].clear()
                fragment[0] = _load_watch()
        assert not seen.intact and seen.fused == [], (what, seen.fused)
        assert torch.nn.functional.multi_head_attention_forward.__code__.co_name == "stand_in", what  # put back
        assert _seen(fragment[0]["watch_ops"], lambda: None).intact, what            # and whole again


def test_a_profiler_of_the_blocks_own_changes_nothing(watch):
    """A recording the block's code runs itself neither hides a fused call nor is disturbed by the watch."""
    prof = torch.autograd.profiler.profile()
    prof.__enter__()
    try:
        seen = _seen(watch, lambda: getattr(torch.nn.functional, "scaled_dot_" + "product_attention")(Q, Q, Q))
        assert seen.intact and SDPA in seen.fused
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
