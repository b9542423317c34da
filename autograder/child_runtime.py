"""Runs inside the submission's own process (never imported by the judge).

The judge forks it from a warm fork server (zygote.py, zygote_runtime.py) or, failing
that, starts ``python -I -S -c PROGRAM``, in an empty scratch directory inside fresh user,
mount, network and PID namespaces where the machine allows; PROGRAM is wire.py +
confine.py + this file + the assignment's driver. It hides the course,
caps the process's resources, loads the submission's definitions statement by
statement into a fresh module, then runs the judge's experiments in forked
workers (see _run_experiments) under per-experiment alarms and limits, and writes
one wire frame per experiment. A frame is written as soon as its experiment ends,
so whatever the submission does in a later one (exit, hang, crash) cannot unwrite it.
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


def _run_one(module, exp, tensors, torch, limits):
    """One experiment under its own alarm; returns its result frame (errors included)."""
    state, meta, arrays = {"stage": "setup"}, {}, {}
    try:
        _signal.alarm(int(limits["seconds_per_experiment"]))
        torch.manual_seed(0)
        meta, arrays = run_experiment(module, exp, tensors, torch, state)
        error = None
    except BaseException as e:  # noqa: BLE001 - SystemExit and timeouts included
        error = describe_error(e, state["stage"])
    _signal.alarm(0)
    try:
        return encode_frame({"kind": "result", "name": exp["name"], "error": error, "meta": meta},
                            {k: v.detach().cpu().numpy() for k, v in arrays.items()})
    except BaseException as e:  # noqa: BLE001 - e.g. a non-tensor slipped into arrays
        return encode_frame({"kind": "result", "name": exp["name"], "error": describe_error(e, "returning results"),
                             "meta": {}})


MAX_RESULT_BYTES = 64 * 1024 * 1024


def _frame_length(buf):
    """Bytes of the first whole frame in ``buf``, or None while it is incomplete."""
    if len(buf) < 8:
        return None
    hlen = int.from_bytes(buf[:8], "little")
    if hlen > MAX_RESULT_BYTES:
        raise ValueError("frame header too large")
    if len(buf) < 8 + hlen:
        return None
    total = 8 + hlen + int(_json.loads(bytes(buf[8:8 + hlen]))["payload"])
    return total if len(buf) >= total else None


def _worker(module, experiments, tensors, torch, limits, w):
    """In a forked process: the experiments one after another, one frame each on fd ``w``."""
    per = int(limits["seconds_per_experiment"])
    _cap_resources(dict(limits, cpu_seconds=(per + 1) * len(experiments)))   # each alarm speaks first
    for exp in experiments:
        view = memoryview(_run_one(module, exp, tensors, torch, limits))
        while view:
            view = view[_os.write(w, view):]
    _os._exit(0)


def _failure(exp, timed_out, status, oversize, garbled):
    if timed_out:
        err = {"type": "Timeout", "message": ""}
    elif oversize:
        err = {"type": "OutputLimit", "message": "returned more data than allowed"}
    elif garbled:
        err = {"type": "Garbled", "message": "wrote something the judge could not read as a result"}
    elif status is not None and _os.WIFSIGNALED(status):
        sig = _os.WTERMSIG(status)
        why = {9: "was killed (memory or CPU-time limit)", 24: "exceeded its CPU-time limit",
               11: "crashed (segmentation fault)"}
        err = {"type": "Killed", "message": why.get(sig, f"was killed by signal {sig}")}
    else:
        code = _os.WEXITSTATUS(status) if status is not None else "unknown"
        err = {"type": "Exited", "message": f"exited (status {code})"}
    return {"kind": "result", "name": exp["name"], "meta": {}, "error": dict(err, stage="this check", line=None)}


def _run_experiments(module, experiments, tensors, torch, limits, rec):
    """Run every experiment in forked workers and record one result frame for each.

    One worker takes them all in turn while it behaves (a fork costs about 10 ms with torch
    loaded); when one exits, crashes, hangs or floods during an experiment, that experiment
    gets the failure and a fresh worker, forked from the same loaded submission, takes the
    rest: whatever a submission does in one check never costs it another.
    """
    import select
    import time
    i = 0
    while i < len(experiments):
        r, w = _os.pipe()
        pid = _os.fork()
        if pid == 0:
            _os.close(r)
            _worker(module, experiments[i:], tensors, torch, limits, w)
        _os.close(w)
        buf, eof = bytearray(), False
        while i < len(experiments):
            exp = experiments[i]
            rec.frame({"kind": "begin", "name": exp["name"]})
            deadline = time.monotonic() + float(limits["seconds_per_experiment"]) + 2.0
            got, timed_out, oversize, garbled = None, False, False, False
            while got is None:
                try:
                    n = _frame_length(buf)
                except (ValueError, KeyError, TypeError):
                    garbled = True
                    break
                if n is not None:
                    frame, buf = bytes(buf[:n]), buf[n:]
                    try:
                        (meta, arrays), = decode_frames(frame)
                    except Exception:  # noqa: BLE001 - what the worker wrote is only data
                        garbled = True
                        break
                    if meta.get("kind") == "result" and meta.get("name") == exp["name"]:
                        got = (meta, arrays)
                    garbled = got is None
                    break
                if eof:
                    break
                if len(buf) > MAX_RESULT_BYTES:
                    oversize = True
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if select.select([r], [], [], left)[0]:
                    data = _os.read(r, 1 << 20)
                    eof = not data
                    buf += data
            if got is None:
                break
            rec.frame(*got)
            i += 1
        _os.close(r)
        status = None
        if i < len(experiments):            # the worker failed experiment i: end it, say why
            if not eof:
                _os.kill(pid, _signal.SIGKILL)
        _, status = _os.waitpid(pid, 0)
        if i < len(experiments):
            rec.frame(_failure(experiments[i], timed_out, status, oversize, garbled))
            i += 1


def _import_torch():
    """torch as every check runs it: one thread, deterministic kernels."""
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    return torch


def _drop_to_user(name):
    """Without namespaces, as root: become the unprivileged user ``name`` (e.g. on Gradescope)."""
    import pwd
    user = pwd.getpwnam(name)
    _os.setgroups([])
    _os.setgid(user.pw_gid)
    _os.setuid(user.pw_uid)
    if _os.getuid() == 0 or _os.geteuid() == 0:
        raise OSError("could not leave root")


def serve(request_path, response_path):
    """Everything a grading child does, from the judge's request to the last frame; never returns."""
    with open(request_path, "rb") as f:
        frames = decode_frames(f.read())
    (request, tensors), = frames[:1]
    limits = request["limits"]
    if request.get("confine"):
        _confine(request["confine"])
    _cap_resources(limits)
    _signal.signal(_signal.SIGALRM, _on_alarm)
    rec = Recorder(response_path)

    torch = _import_torch()
    tensors = {k: torch.from_numpy(v) for k, v in tensors.items()}

    for name, src in request.get("modules", {}).items():     # released helpers a notebook imports
        helper = _types.ModuleType(name)
        _sys.modules[name] = helper
        exec(compile(src, f"<{name}>", "exec"), helper.__dict__)
    if request.get("run_as"):
        _drop_to_user(request["run_as"])

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

    _run_experiments(module, request["experiments"], tensors, torch, limits, rec)
    rec.frame({"kind": "done"})
    _os._exit(0)                        # skip the submission's atexit handlers and finalizers


def main():
    serve(_sys.argv[1], _sys.argv[2])
