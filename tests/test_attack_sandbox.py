"""Attacks on the grading child itself: forged result streams, classmates' files, host files, exhaustion.

Each case is a submission a motivated student could write from the README and the kit's code. The
fair outcome is asserted (a forged stream earns nothing a Head returning the same arrays would not;
nothing of another child or of the host is visible; a bomb costs only what it broke), and that
nothing of the course or the machine changed. Graded on the warm path, the fresh path
(ATTNKIT_ZYGOTE=0) and, where it applies, without namespaces.
"""
import base64
import secrets
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from autograder.causal_head.plan import make_plan
from attnkit.engine import judge
from attnkit.isolation import sandbox, framing
from attnkit.engine.judge import grade
from attnkit.isolation.notebook_code import extract
from attnkit.isolation.sandbox import Limits, namespaces_available
from tests.notebooks import solution_source, spied, submission

SOL = solution_source("causal_head", "head")
CLASS_LINE = "class Head(nn.Module):\n"
INIT_LINE = "        super().__init__()\n"
LIMITS = Limits(wall_seconds=40, cpu_seconds=40, memory_mb=6144, seconds_per_experiment=5)
confined = pytest.mark.skipif(not namespaces_available() and not os.environ.get("CI"),
                              reason="this machine offers no unprivileged namespaces")
# Checks of properties of the returned arrays alone, or of their consistency with each other: a
# stream computed ahead of time can show those; every check against this run's inputs it cannot.
STRUCTURE_ONLY = {"simplex_rows", "positive_weights", "lower_triangular", "mask_buffer", "interface",
                  "noncausal_unmasked", "causality_perturbation", "causality_gradient", "gradient_flow",
                  "short_sequence"}


def head(src):
    return submission("causal_head", {"head": src})


def in_class_body(code, src=SOL):
    return src.replace(CLASS_LINE, CLASS_LINE + "".join(f"    {l}\n" for l in code.splitlines()))


def in_init(code, src=SOL):
    return src.replace(INIT_LINE, INIT_LINE + "".join(f"        {l}\n" for l in code.splitlines()))


def failed(result):
    return {c["id"] for c in result["checks"] if not c["passed"]}


def msgs(result):
    return " | ".join(c["message"] for c in result["checks"] if not c["passed"]) + f" | error: {result['error']}"


@pytest.fixture(params=["warm", "fresh"])
def path(request, monkeypatch):
    monkeypatch.setenv("ATTNKIT_ZYGOTE", "1" if request.param == "warm" else "0")
    return request.param


# ---- 3. the result stream forged from inside -------------------------------------------------

def _genuine_stream() -> bytes:
    """What a correct Head's loader reports for the kit's public plan (seed 2024), frame by frame:
    the stream a forger can compute ahead of time from the kit's own code."""
    plan = make_plan()
    code = extract(head(SOL))
    run = sandbox.run_child(judge.child_program("causal_head"),
                            {"source": code.source, "experiments": plan["experiments"]},
                            {k: v.numpy() for k, v in plan["tensors"].items()}, LIMITS)
    frames = [(m, a) for m, a in run.frames if m.get("kind") in ("loaded", "begin", "result", "done")]
    assert [m["kind"] for m, _ in frames][:2] == ["loaded", "begin"]
    return b"".join(framing.encode_frame(m, a) for m, a in frames)


FORGER = """import base64 as _b, os as _o, stat as _s, fcntl as _f
_blob = _b.b64decode({blob!r})
for _fd in range(3, 256):             # every pipe or file this process may write: the recorder is one
    try:
        _st = _o.fstat(_fd)
        if (_s.S_ISFIFO(_st.st_mode) or _s.S_ISREG(_st.st_mode)) and _f.fcntl(_fd, _f.F_GETFL) & 3:
            _o.write(_fd, _blob)
    except OSError:
        pass
_o._exit(0)"""
IDENTITY = SOL.replace("return A @ v ", "return x[..., :v.shape[-1]] ")


def test_a_precomputed_stream_written_from_inside_earns_nothing_a_head_could_not(path):
    stream = _genuine_stream()
    started = framing.encode_frame({"kind": "started", "confined": True})
    forged = grade(head(in_class_body(FORGER.format(blob=base64.b64encode(stream).decode()), IDENTITY)),
                   "causal_head", LIMITS)
    with_started = grade(head(in_class_body(FORGER.format(blob=base64.b64encode(started + stream).decode()),
                                            IDENTITY)), "causal_head", LIMITS)
    # secret inputs (the course key): answers for the public plan do not fit this run's inputs
    assert {"reference_agreement", "convex_hull", "scaling", "equivariance"} <= failed(forged), msgs(forged)
    assert forged["score"] <= sum(c["max_points"] for c in forged["checks"] if c["id"] in STRUCTURE_ONLY)
    # a stream that does not follow the protocol is the submission's failure, said plainly
    assert with_started["score"] == 0 and "could not read" in with_started["error"], msgs(with_started)


GARBAGE = {
    "bytes": "_o.write(_fd, b'\\x07' * 100 + b'not a frame')",
    "error_is_a_string": "_o.write(_fd, _enc({'kind': 'loaded', 'error': 'boom', 'notes': 'x'}))",
    "huge_header": "_o.write(_fd, (1 << 40).to_bytes(8, 'little') + b'{')",
    "wrong_kind": "_o.write(_fd, _enc({'kind': 'done'}))",
    "fake_kit_fault": "_o.write(2, b'Traceback (most recent call last): a fault of the kit')",
}
WRITER = """import json as _j, os as _o, stat as _s, fcntl as _f, struct as _st
_enc = lambda meta, _j=_j, _st=_st: (lambda h: _st.pack("<Q", len(h)) + h)(
    _j.dumps({{"meta": meta, "arrays": {{}}, "payload": 0}}).encode())
for _fd in range(3, 256):
    try:
        _m = _o.fstat(_fd).st_mode
        if (_s.S_ISFIFO(_m) or _s.S_ISREG(_m)) and _f.fcntl(_fd, _f.F_GETFL) & 3:
            {write}
    except OSError:
        pass
_o._exit(0)"""


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_malformed_frames_are_the_submissions_failure_never_a_crash(case):
    result = grade(head(in_class_body(WRITER.format(write=GARBAGE[case]))), "causal_head", LIMITS)
    assert result["score"] == 0, msgs(result)
    text = msgs(result)
    assert "fault of the kit" not in text and "Traceback" not in text, text
    assert "exited" in text or "could not read" in text, text


# ---- 2. classmates' code during parallel grading ---------------------------------------------

MARKER = "CLASSMATE-MARKER-7731"
SPY = """import os as _o, glob as _g
_found = []
_deadline = __import__('time').time() + 3
while not _found and __import__('time').time() < _deadline:
    _paths = [p for d in ('/tmp', '/var/tmp', '/dev/shm', '/run') for p in _g.glob(d + '/*') + _g.glob(d + '/*/.*')]
    _paths += [f'/proc/{_p}/{_k}' for _p in _o.listdir('/proc') if _p.isdigit() for _k in ('cmdline', 'environ')]
    for _p in _paths:
        try:
            with open(_p, 'rb') as _fh:
                if b'CLASSMATE-' + b'MARKER-7731' in _fh.read(5_000_000):
                    _found.append(_p)
        except OSError:
            pass
    __import__('time').sleep(0.05)
raise RuntimeError('FOUND ' + ' '.join(_found)[:150] if _found else 'NOTHING OF ANYONE')"""
SLOW_CLASSMATE = f"import time\n_MARK = {MARKER!r}\n" + in_class_body("time.sleep(2)")


@confined
def test_no_child_sees_a_classmate_or_the_grader(path):
    with ThreadPoolExecutor(2) as ex:
        classmate = ex.submit(grade, head(SLOW_CLASSMATE), "causal_head", LIMITS)
        time.sleep(0.3)
        spy = ex.submit(spied, head(in_init(SPY)), "causal_head", LIMITS)
        classmate, spy = classmate.result(), spy.result()
    assert classmate["score"] == 20, msgs(classmate)
    assert "NOTHING OF ANYONE" in spy, spy


# ---- 6. reads the child should not have ------------------------------------------------------

READER = """import os as _o
_read = []
for _p in ('/etc/shadow', '/root/.bashrc', '/root/.ssh/id_rsa', {kit!r} + '/README.md',
           {kit!r} + '/attnkit/toolkit/reference.py', {kit!r} + '/.attnkit/grading-key', '/home', {tmp!r}):
    try:
        if _o.path.isdir(_p):
            if _o.listdir(_p):
                _read.append(_p)
        else:
            open(_p, 'rb').read(1)
            _read.append(_p)
    except OSError:
        pass
raise RuntimeError('READ ' + ' '.join(_read) if _read else 'READ NOTHING')"""


@confined
def test_the_child_reads_no_host_file_outside_what_it_needs(tmp_path, path):
    (tmp_path / "classmate.ipynb").write_text("{}")
    from tests import KIT_ROOT
    seen = spied(head(in_init(READER.format(kit=str(KIT_ROOT), tmp=str(tmp_path)))), "causal_head", LIMITS)
    assert "READ NOTHING" in seen, seen


@confined
def test_what_the_child_needs_is_there_read_only():
    probe = in_init("import os as _o, numpy, torch, matplotlib\n"
                    "open('/tmp/x', 'w').write('ok')\n"
                    "for _p in ('/usr/x', _o.path.dirname(torch.__file__) + '/x', '/x'):\n"
                    "    try:\n        open(_p, 'w'); raise RuntimeError('WROTE ' + _p)\n"
                    "    except OSError:\n        pass")
    result = grade(head(probe), "causal_head", LIMITS)
    assert result["score"] == 20, msgs(result)


# ---- 7. denial of service ---------------------------------------------------------------------

DEEP_TREE = """import os as _o
_o.chdir(_o.environ.get('TMPDIR', '.'))
for _i in range(5000):
    _o.mkdir('d')
    _o.chdir('d')
for _n in ('.response', '.stderr', '.request'):
    try:
        _o.mkfifo(_n)
    except OSError:
        pass"""


@pytest.mark.parametrize("namespaces", [True, False])
def test_a_deep_tree_and_fifos_in_the_scratch_cost_nothing(monkeypatch, tmp_path, namespaces):
    if namespaces and not namespaces_available():
        pytest.skip("no namespaces here")
    monkeypatch.setattr(sandbox, "_namespaces_ok", namespaces)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # this test's scratch only, not the machine's
    result = grade(head(in_class_body(DEEP_TREE)), "causal_head", LIMITS)
    assert result["score"] == 20, msgs(result)
    left = [p for p in os.listdir(tmp_path) if p.startswith("attnkit-child-")]
    assert not left, f"scratch left behind: {left}"


@confined
def test_the_scratch_is_size_capped_and_a_full_one_costs_nothing():
    fill = in_class_body("try:\n    open('/tmp/big', 'wb').write(b'x' * 300 * 2**20)\nexcept OSError as _e:\n"
                         "    _FULL = str(_e)")
    result = grade(head(fill), "causal_head", LIMITS)
    assert result["score"] == 20, msgs(result)


SLEEPER = f"4243.{secrets.randbelow(10**6):06d}"    # this run's own sleepers: another suite's are not ours
BOMB = """import os as _o
_kids = 0
try:
    for _i in range(2000):
        if _o.fork() == 0:
            _o.execv('/bin/sleep', ['sleep', '{SLEEPER}'])
        _kids += 1
except OSError:
    pass
raise RuntimeError(f'STARTED {_kids} ')""".replace("{SLEEPER}", SLEEPER)


@confined
def test_a_fork_bomb_is_capped_and_ends_with_the_child():
    t0 = time.monotonic()
    text = spied(head(in_init(BOMB)), "causal_head", LIMITS)
    assert "STARTED " in text, text
    started = int(text.split("STARTED ")[1].split()[0])
    assert started == 0, text                      # the loader may start no process at all
    assert time.monotonic() - t0 < LIMITS.wall_seconds
    left = subprocess.run(["pgrep", "-f", f"sleep {SLEEPER}"], capture_output=True, text=True).stdout
    assert left == "", f"processes outlived grading: {left}"


TWO_HOGS = """import os as _o, torch as _t
_r, _w = _o.pipe()
if _o.fork() == 0:
    _x = _t.ones(700 * 2**18)             # 700 MiB, touched
    _o.write(_w, b'1')
    __import__('time').sleep(20)
    _o._exit(0)
_o.read(_r, 1)
_y = _t.ones(700 * 2**18)
__import__('time').sleep(1)"""


@confined
def test_memory_is_capped_for_all_processes_together():
    limits = Limits(wall_seconds=40, cpu_seconds=40, memory_mb=1024, seconds_per_experiment=8)
    forward = "    def forward(self, x):                                       # x: (B, T, d)\n"
    hog = SOL.replace(forward, forward + "".join(f"        {l}\n" for l in TWO_HOGS.splitlines()), 1)
    assert hog != SOL
    result = grade(head(hog), "causal_head", limits)
    # The second process is never started (the loader may start none: child_runtime._no_new_processes), so
    # the two can never hold more than the one's address space; where one could, the cgroup and the
    # monitor's summed watch would end them ("memory ... all its processes together").
    assert result["score"] < 20 and "tried to start another process or thread" in msgs(result), msgs(result)
    fine = grade(head(SOL), "causal_head", limits)
    assert fine["score"] == 20, msgs(fine)


# ---- 8. honest students: a large source is graded ------------------------------------------------

def test_a_long_constant_is_graded_not_a_kit_fault():
    big = "TABLE = " + repr("x" * (2 * 2**20)) + "\n\n" + SOL
    result = grade(head(big), "causal_head", LIMITS)
    assert result["score"] == 20 and result["error"] is None, msgs(result)


# ---- the kernel run (nbgrader path) lives in the same world -------------------------------------

KERNEL_ATTACK = """import os, pathlib
found = []
for p in ('/etc/shadow', {kit!r} + '/README.md', {kit!r} + '/gradebook.db', '/root/.bashrc', '/home'):
    try:
        if os.path.isdir(p):
            found += os.listdir(p)
        else:
            open(p, 'rb').read(1); found.append(p)
    except OSError:
        pass
try:
    open('big', 'wb').write(b'x' * 100 * 2**20)
    found.append('wrote 100 MB')
except OSError as e:
    print('write refused:', e)
print('FOUND', found)"""


@confined
def test_the_kernel_run_sees_no_host_file_and_has_a_file_size_limit(tmp_path):
    import nbformat
    from tests import KIT_ROOT
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(KERNEL_ATTACK.format(kit=str(KIT_ROOT)))])
    (tmp_path / "helper.py").write_text("X = 1\n")
    out = sandbox.run_notebook(nb, str(tmp_path), 60, 120, 4096)
    assert out is not None
    text = "".join("".join(o.get("text", "")) for c in out["cells"] for o in c.get("outputs", []))
    assert "FOUND []" in text, text
    assert "write refused" in text, text
