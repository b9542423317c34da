"""Runs inside the submission's own process (never imported by the judge).

The judge starts ``python -I -S -c PROGRAM`` in an empty scratch directory,
inside fresh user, mount, network and PID namespaces where the machine allows;
PROGRAM is wire.py + this file + the assignment's driver. It hides the course,
caps the process's resources, loads the submission's definitions statement by
statement into a fresh module, then runs each of the judge's experiments in a
forked process of its own with its own limits, and writes one wire frame per
experiment. A frame is written as soon as its experiment ends, so whatever the
submission does in a later one (exit, hang, crash) cannot unwrite it.
"""
import ast as _ast
import json as _json
import os as _os
import resource as _resource
import signal as _signal
import sys as _sys
import traceback as _traceback
import types as _types

SUBMISSION_FILE = "<submission>"


class ExperimentTimeout(BaseException):
    """Raised by the alarm; a BaseException so a student's ``except Exception`` cannot swallow it."""


def _cap_resources(limits):
    mem = int(limits["memory_mb"]) * 1024 * 1024
    cpu = int(limits["cpu_seconds"])
    for res, value in ((_resource.RLIMIT_AS, mem), (_resource.RLIMIT_CPU, cpu),
                       (_resource.RLIMIT_CORE, 0), (_resource.RLIMIT_FSIZE, 64 * 1024 * 1024)):
        try:
            _resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass


def _on_alarm(signum, frame):
    raise ExperimentTimeout()


def describe_error(exc, stage):
    """A plain-words account of ``exc``, with the submission line it came from."""
    line = None
    for fs in _traceback.extract_tb(exc.__traceback__):
        if fs.filename == SUBMISSION_FILE:
            line = fs.lineno
    if isinstance(exc, ExperimentTimeout):
        kind, msg = "Timeout", "took longer than the time allowed for this check"
    elif isinstance(exc, MemoryError):
        kind, msg = "MemoryError", "ran out of the memory allowed for this check"
    elif isinstance(exc, SystemExit):
        kind, msg = "SystemExit", f"called sys.exit({exc.code!r})"
    elif isinstance(exc, NotImplementedError):
        kind, msg = "NotImplementedError", "not answered yet"
    else:
        kind, msg = type(exc).__name__, str(exc)[:500]
    return {"stage": stage, "type": kind, "message": msg, "line": line}


def student_class(module, name):
    """The class the contract names, or the plain-words reason it is missing."""
    cls = getattr(module, name, None)
    if cls is None:
        raise LookupError(f"class `{name}` not found in your notebook")
    return cls


def as_tensor(value, what, torch):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} is a {type(value).__name__}, expected a torch.Tensor")
    return value


class Recorder:
    def __init__(self, path):
        self.fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT | _os.O_APPEND, 0o600)

    def frame(self, meta, arrays=None):
        data = encode_frame(meta, arrays)
        view = memoryview(data)
        while view:
            view = view[_os.write(self.fd, view):]


def load_submission(source):
    """Execute each kept statement on its own; a failing import or constant is a note, not a fatal error."""
    module = _types.ModuleType("submission")
    module.__file__ = SUBMISSION_FILE
    _sys.modules["submission"] = module
    notes = []
    tree = _ast.parse(source, SUBMISSION_FILE)
    for stmt in tree.body:
        code = compile(_ast.Module(body=[stmt], type_ignores=[]), SUBMISSION_FILE, "exec")
        try:
            exec(code, module.__dict__)
        except Exception as e:  # noqa: BLE001 - the judge reports, the student fixes
            notes.append(describe_error(e, "definitions"))
    return module, notes


def _run_one(module, exp, tensors, torch, limits, write):
    """In a forked process: one experiment under its own CPU, memory and time limits."""
    state, meta, arrays = {"stage": "setup"}, {}, {}
    try:
        _cap_resources(dict(limits, cpu_seconds=int(limits["seconds_per_experiment"]) + 1))  # the alarm speaks first
        _signal.alarm(int(limits["seconds_per_experiment"]))
        torch.manual_seed(0)
        meta, arrays = run_experiment(module, exp, tensors, torch, state)
        error = None
    except BaseException as e:  # noqa: BLE001 - SystemExit and timeouts included
        error = describe_error(e, state["stage"])
    _signal.alarm(0)
    try:
        write(encode_frame({"kind": "result", "name": exp["name"], "error": error, "meta": meta},
                           {k: v.detach().cpu().numpy() for k, v in arrays.items()}))
    except BaseException as e:  # noqa: BLE001 - e.g. a non-tensor slipped into arrays
        write(encode_frame({"kind": "result", "name": exp["name"], "error": describe_error(e, "returning results"),
                            "meta": {}}))


def _supervise(module, exp, tensors, torch, limits, rec):
    """Fork, collect the child's frame through a pipe, and account for any way it can end."""
    import select
    import time
    r, w = _os.pipe()
    pid = _os.fork()
    if pid == 0:
        _os.close(r)
        out = _os.fdopen(w, "wb", buffering=0)
        _run_one(module, exp, tensors, torch, limits, out.write)
        _os._exit(0)
    _os.close(w)
    deadline = time.monotonic() + float(limits["seconds_per_experiment"]) + 2.0
    chunks, size, timed_out = [], 0, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            data = _os.read(r, 1 << 20)
            if not data:
                break
            size += len(data)
            if size > 64 * 1024 * 1024:
                break
            chunks.append(data)
    _os.close(r)
    if timed_out:
        _os.kill(pid, _signal.SIGKILL)
    _, status = _os.waitpid(pid, 0)
    frames = []
    try:
        frames = decode_frames(b"".join(chunks))
    except Exception:  # noqa: BLE001 - what the child wrote is only data
        pass
    if frames and not timed_out:
        meta, arrays = frames[0]
        if meta.get("kind") == "result" and meta.get("name") == exp["name"]:
            rec.frame(meta, arrays)
            return
    if timed_out:
        err = {"type": "Timeout", "message": ""}
    elif _os.WIFSIGNALED(status):
        sig = _os.WTERMSIG(status)
        why = {9: "was killed (memory or CPU-time limit)", 24: "exceeded its CPU-time limit",
               11: "crashed (segmentation fault)"}
        err = {"type": "Killed", "message": why.get(sig, f"was killed by signal {sig}")}
    elif size > 64 * 1024 * 1024:
        err = {"type": "OutputLimit", "message": "returned more data than allowed"}
    else:
        err = {"type": "Exited", "message": f"exited (status {_os.WEXITSTATUS(status)})"}
    rec.frame({"kind": "result", "name": exp["name"], "meta": {},
               "error": dict(err, stage="this check", line=None)})


def main():
    request_path, response_path = _sys.argv[1], _sys.argv[2]
    with open(request_path, "rb") as f:
        frames = decode_frames(f.read())
    (request, tensors), = frames[:1]
    limits = request["limits"]
    if request.get("confine"):
        _confine(request["confine"])
    _cap_resources(limits)
    _signal.signal(_signal.SIGALRM, _on_alarm)
    rec = Recorder(response_path)

    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    tensors = {k: torch.from_numpy(v) for k, v in tensors.items()}

    for name, src in request.get("modules", {}).items():     # released helpers a notebook imports
        helper = _types.ModuleType(name)
        _sys.modules[name] = helper
        exec(compile(src, f"<{name}>", "exec"), helper.__dict__)

    rec.frame({"kind": "started", "confined": bool(request.get("confine"))})
    try:
        _signal.alarm(int(limits["seconds_per_experiment"]))
        module, notes = load_submission(request["source"])
        _signal.alarm(0)
    except BaseException as e:  # noqa: BLE001
        _signal.alarm(0)
        rec.frame({"kind": "loaded", "error": describe_error(e, "definitions"), "notes": []})
        _os._exit(0)
    rec.frame({"kind": "loaded", "error": None, "notes": notes})

    for exp in request["experiments"]:
        rec.frame({"kind": "begin", "name": exp["name"]})
        _supervise(module, exp, tensors, torch, limits, rec)
    rec.frame({"kind": "done"})
    _os._exit(0)                        # skip the submission's atexit handlers and finalizers
