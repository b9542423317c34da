"""Runs inside the grading child (never imported by the judge).

The judge forks it from a warm fork server (zygote.py, zygote_runtime.py), or starts that server
for one submission; that server imports this module (with wire, confine and op_watch) and loads the
assignment's driver (``autograder/<A>/drive.py``, whose ``run_experiment`` runs each experiment)
before any submission code exists (sandbox.child_program). Two kinds of process take part, and only
one of them runs submission code:

  the monitor (``serve``, PID 1 of the child's namespaces) reads the judge's request from a pipe,
      holds the one channel back to the judge, and never runs submission code: it is not
      dumpable (no process of the same uid may trace it or open its /proc files), and as PID 1
      it cannot be killed from inside. It forks
  the loader (``_loader``), which gives up what the submission may not have (that channel, the
      monitor's stderr), caps its resources, loads the submission's definitions statement by
      statement into a fresh module and runs the judge's experiments one after another (see
      _run_experiments) under per-experiment alarms and limits, writing one frame per step to
      a pipe the monitor reads.

The monitor accepts only the protocol (loaded, then begin/result for each experiment of the
plan, in order, then done), with strict limits on every frame, a deadline on every step and a
watch on the memory and processes of the whole namespace; anything else ends the loader and
costs the submission that experiment, and a fresh loader (forked again from the monitor, loading
the submission anew) takes the rest: one check never costs another. So whatever the
submission writes, the judge receives a well-formed account of the plan's experiments.
"""
import ast as _ast
import json as _json
import os as _os
import resource as _resource
import signal as _signal
import sys as _sys
import time as _time
import traceback as _traceback
import types as _types

from attnkit.isolation.confine import hide_from_peers
from attnkit.isolation.op_watch import prime_op_watch, watch_ops
from attnkit.isolation.framing import decode_frames, encode_frame
from attnkit.toolkit import driver as _driver_api     # the driver's helpers; this runtime sets their contract

SUBMISSION_FILE = _driver_api.SUBMISSION_FILE
MESSAGE_CHARS = 200          # of a submission's own exception text, in any message
GARBLED = "wrote something the judge could not read as a result"


_driver = None     # the assignment's driver module (use_driver), loaded in the fork server


def load_driver(path):
    """The assignment's driver, from its file, as a module of its own (its package is the judge's, which the
    child never imports)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("attnkit_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def use_driver(module, name, kind):
    """Grade with ``module``'s run_experiment; the student's ``name`` (a ``kind``: class or function) is what
    the driver reaches through attnkit.toolkit.driver.student_object()."""
    global _driver
    _driver = module
    _driver_api.use_contract(name, kind)


class ExperimentTimeout(BaseException):
    """Raised by the alarm; a BaseException so a student's ``except Exception`` cannot swallow it."""


def _cap_resources(limits, processes=False):
    """Per-process caps; with ``processes``, also the number of processes of this uid (in a user
    namespace of its own the count is the child's alone)."""
    mem = int(limits["memory_mb"]) * 1024 * 1024
    cpu = int(limits["cpu_seconds"])
    caps = [(_resource.RLIMIT_AS, mem), (_resource.RLIMIT_CPU, cpu),
            (_resource.RLIMIT_CORE, 0), (_resource.RLIMIT_FSIZE, int(limits.get("file_mb", 64)) * 1024 * 1024)]
    if processes:
        caps.append((_resource.RLIMIT_NPROC, int(limits.get("max_processes", 64))))
    for res, value in caps:
        try:
            _resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass


def _started_another(exc):
    """Whether ``exc``, or an exception it was raised from, is a process or thread refused to start."""
    seen = 0
    while exc is not None and seen < 20:
        if (isinstance(exc, BlockingIOError) and exc.errno == 11) or (
                isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _no_new_processes():
    """From here on this process can start no other: no fork, spawn or thread. Work done in another
    process (torch's fused attention in a forked child, a fresh interpreter) would be out of the operator
    watch's sight, and nothing a head or a model computes needs one. RLIMIT_NPROC counts the tasks of
    this uid (in its own user namespace: the monitor and this loader; elsewhere the grading user's),
    never fewer than one, so a limit of 1 leaves none to start."""
    try:
        _resource.setrlimit(_resource.RLIMIT_NPROC, (1, 1))
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
    elif type(exc) is _driver_api.ContractMissing:
        kind, msg = "NotFound", str(exc)
    elif isinstance(exc, NotImplementedError):
        kind, msg = "NotImplementedError", "not answered yet"
    elif _started_another(exc):
        kind, msg = "NoNewProcess", ("tried to start another process or thread (multiprocessing, subprocess, "
                                     "threads, torch.compile's compiler): grading runs your code in the one "
                                     "process that calls it, and nothing in this assignment needs another")
    else:
        kind, msg = type(exc).__name__[:80], str(exc)[:MESSAGE_CHARS]
    return {"stage": stage, "type": kind, "message": msg, "line": line}


class Recorder:
    """Writes frames to a pipe."""

    def __init__(self, fd):
        self.fd = fd

    def frame(self, meta, arrays=None):
        self.write(encode_frame(meta, arrays))

    def write(self, data):
        view = memoryview(data)
        while view:
            view = view[_os.write(self.fd, view):]


_DEFINITIONS = (_ast.Import, _ast.ImportFrom, _ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef)


def load_submission(source, statement_seconds=0.0):
    """Execute each kept statement on its own; a failing import, constant or module-level statement is a note,
    not a fatal error. With ``statement_seconds``, each statement that is not an import, ``def`` or ``class``
    (the module-level statements of the slice, notebook_slice) has that long (within whatever the alarm
    already running leaves): one that takes longer is a note ("Timeout") and the next one runs."""
    module = _types.ModuleType("submission")
    module.__file__ = SUBMISSION_FILE
    _sys.modules["submission"] = module
    notes = []
    import linecache                                    # the source findable, as for a file: TorchScript
    linecache.cache[SUBMISSION_FILE] = (len(source), None, source.splitlines(True), SUBMISSION_FILE)
    tree = _ast.parse(source, SUBMISSION_FILE)
    for stmt in tree.body:
        code = compile(_ast.Module(body=[stmt], type_ignores=[]), SUBMISSION_FILE, "exec")
        left = _signal.getitimer(_signal.ITIMER_REAL)[0]          # the loading alarm's time left (0: none)
        own = (bool(statement_seconds) and (not left or statement_seconds < left)
               and not isinstance(stmt, _DEFINITIONS))      # a class body is timed as before, by the load's alarm
        began = _time.monotonic()
        if own:
            _signal.setitimer(_signal.ITIMER_REAL, statement_seconds)
        try:
            exec(code, module.__dict__)
        except ExperimentTimeout as e:
            if not own:
                raise
            notes.append(dict(describe_error(e, "definitions"), line=stmt.lineno))
        except Exception as e:  # noqa: BLE001 - the judge reports, the student fixes
            notes.append(describe_error(e, "definitions"))
        finally:
            if own:                                    # the loading alarm again, less what this statement took
                _signal.setitimer(_signal.ITIMER_REAL, max(left - (_time.monotonic() - began), 0.001) if left else 0)
    return module, notes


def _plain(arrays, state):
    """The experiment's arrays as numpy, computed here, inside the watched block: a value whose work was
    put off (a tensor subclass that computes only when read) does it now, where the watch sees it."""
    state["stage"] = "returning results"
    return {k: v.detach().cpu().numpy() for k, v in arrays.items()}


def _run_one(module, exp, tensors, torch, limits, loading):
    """One experiment under its own alarm; returns its result frame (errors included). ``loading`` is the
    operator watch's record of loading the definitions (class bodies, decorators, module-level code),
    which every watched experiment's record includes: what ran then ran for the class it built."""
    state, meta, arrays, ops = {"stage": "setup"}, {}, {}, None
    try:
        _signal.alarm(int(limits["seconds_per_experiment"]))
        torch.manual_seed(0)
        if exp.get("watch", True):
            with watch_ops(torch) as seen:
                meta, arrays = _driver.run_experiment(module, exp, tensors, torch, state)
                arrays = _plain(arrays, state)
            ops = {"fused": sorted(set(seen.fused) | set(loading.fused)),
                   "intact": bool(seen.intact and loading.intact)}
        else:
            meta, arrays = _driver.run_experiment(module, exp, tensors, torch, state)
            arrays = _plain(arrays, state)
        error = None
    except BaseException as e:  # noqa: BLE001 - SystemExit and timeouts included
        meta, arrays = {}, {}
        error = describe_error(e, state["stage"])
    _signal.alarm(0)
    try:
        frame = {"kind": "result", "name": exp["name"], "error": error, "meta": meta}
        if ops is not None:
            frame["ops"] = ops
        return encode_frame(frame, arrays)
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


def _run_experiments(module, experiments, tensors, torch, limits, rec, loading):
    """The experiments one after another in this process, a begin and a result frame for each.

    A result frame is written as soon as its experiment ends, so whatever the submission does in a
    later one (exit, hang, crash, flood) cannot unwrite it; the monitor then gives that experiment
    the failure and forks a fresh loader for the rest, so one check never costs another.
    """
    for exp in experiments:
        rec.frame({"kind": "begin", "name": exp["name"]})
        rec.write(_run_one(module, exp, tensors, torch, limits, loading))


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


REQUEST_LIMIT = 512 * 1024 * 1024        # the judge's own request: source, plan, tensors
LOADER_EXTRA_TRIES = 2                   # fresh loaders beyond one per experiment, before the rest is given up
WATCH_SECONDS = 0.05                     # how often the monitor looks at the whole namespace


def _read_all(fd, limit):
    chunks, total = [], 0
    while True:
        data = _os.read(fd, 1 << 20)
        if not data:
            return b"".join(chunks)
        total += len(data)
        if total > limit:
            raise ValueError("request too large")
        chunks.append(data)


def _forget_own_modules():
    """Take the grader's own modules out of the module table before any submission code runs: what that code
    finds there by name (to clear or patch) is then torch's, the libraries' and its own. The runtime keeps
    its functions (they hold their globals), and nothing of the kit is imported after this."""
    for name in [n for n in _sys.modules if n.split(".")[0] in ("attnkit", "autograder")]:
        del _sys.modules[name]


def _loader(request, source, tensors, torch, experiments, out_fd):
    """The process that runs the submission: load its definitions, then the experiments; never returns."""
    null = _os.open(_os.devnull, _os.O_RDWR)
    for fd in (0, 1, 2):                 # the monitor's stderr reaches the judge: not for submission text
        _os.dup2(null, fd)
    _os.close(null)
    limits = request["limits"]
    _cap_resources(limits, processes=request.get("namespaced"))
    _signal.signal(_signal.SIGALRM, _on_alarm)
    for name, src in request.get("modules", {}).items():     # released helpers a notebook imports
        helper = _types.ModuleType(name)
        _sys.modules[name] = helper
        exec(compile(src, f"<{name}>", "exec"), helper.__dict__)
    if request.get("run_as"):
        _drop_to_user(request["run_as"])
    _no_new_processes()
    _forget_own_modules()
    rec = Recorder(out_fd)
    try:
        _signal.alarm(int(limits["seconds_per_experiment"]))
        with watch_ops(torch) as loading:
            module, notes = load_submission(source, float(limits.get("seconds_per_statement", 0) or 0))
        _signal.alarm(0)
    except BaseException as e:  # noqa: BLE001
        _signal.alarm(0)
        rec.frame({"kind": "loaded", "error": describe_error(e, "definitions"), "notes": []})
        _os._exit(0)
    rec.frame({"kind": "loaded", "error": None, "notes": notes[:50]})
    _run_experiments(module, experiments, tensors, torch, limits, rec, loading)
    rec.frame({"kind": "done"})
    _os._exit(0)                        # skip the submission's atexit handlers and finalizers


def _text(value, limit=MESSAGE_CHARS):
    return value[:limit] if isinstance(value, str) else None


def _clean_error(err):
    """An error record as the judge reads it, whatever the loader wrote."""
    if err is None:
        return None
    if not isinstance(err, dict):
        return {"stage": "this check", "type": "Garbled", "message": GARBLED, "line": None}
    line = err.get("line")
    return {"stage": _text(err.get("stage")) or "this check", "type": _text(err.get("type"), 80) or "Error",
            "message": _text(err.get("message")) or "", "line": line if isinstance(line, int) and line > 0 else None}


def _clean_result(meta, exp_name):
    frame = {"kind": "result", "name": exp_name, "error": _clean_error(meta.get("error")),
             "meta": meta.get("meta") if isinstance(meta.get("meta"), dict) else {}}
    ops = meta.get("ops")
    if isinstance(ops, dict):
        fused = ops.get("fused")
        frame["ops"] = {"fused": [_text(f, 120) for f in fused if isinstance(f, str)][:20] if isinstance(fused, list) else [],
                        "intact": ops.get("intact") is True}
    return frame


class _Namespace:
    """What the monitor knows of the processes of its namespace (it is PID 1 there)."""

    def __init__(self, limits, namespaced):
        self.namespaced = namespaced
        self.memory_kib = int(limits["memory_mb"]) * 1024
        self.max_processes = int(limits.get("max_processes", 64))
        self.page_kib = _os.sysconf("SC_PAGE_SIZE") // 1024
        self.ended = {}

    def over(self):
        """A sentence when all processes together use more memory or more processes than allowed."""
        if not self.namespaced:
            return None
        rss, count = 0, 0
        for entry in _os.listdir("/proc"):
            if not entry.isdigit() or entry == "1":
                continue
            try:
                with open(f"/proc/{entry}/statm") as f:
                    rss += int(f.read().split()[1]) * self.page_kib
                count += 1
            except (OSError, ValueError, IndexError):
                pass
        if rss > self.memory_kib:
            return ("Killed", f"used more than {self.memory_kib // 1024} MiB of memory in all its processes together")
        if count > self.max_processes:
            return ("Killed", f"started more than {self.max_processes} processes")
        return None

    def end_all(self, pid):
        """End the loader and everything it started."""
        if self.namespaced:      # as PID 1: every other process of the namespace (elsewhere the
            try:                 # judge kills the whole process group at the end)
                _os.kill(-1, _signal.SIGKILL)
            except OSError:
                pass
        try:
            _os.kill(pid, _signal.SIGKILL)
        except OSError:
            pass

    def reap(self):
        """Collect every ended process (as PID 1, orphans are ours); keep the loaders' wait statuses."""
        while True:
            try:
                pid, status = _os.waitpid(-1, _os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.ended[pid] = status

    def status_of(self, pid):
        while pid not in self.ended:
            try:
                got, status = _os.waitpid(pid, 0)
            except ChildProcessError:
                return self.ended.get(pid, 0)
            self.ended[got] = status
        return self.ended.pop(pid)


def _follow(pid, r, experiments, i, out, limits, ns, first):
    """Read one loader's frames, forward what the protocol allows; return (next experiment, stop)."""
    import select
    import time
    per = float(limits["seconds_per_experiment"])
    buf, eof, stage = bytearray(), False, "load"
    deadline = time.monotonic() + per + 5.0
    failure = None
    while True:
        frame = None
        try:
            n = _frame_length(buf)
            if n is not None:
                (meta, arrays), = decode_frames(bytes(buf[:n]), strict=True)
                del buf[:n]
                frame = (meta, arrays)
        except Exception:  # noqa: BLE001 - what the loader wrote is only data
            failure = ("Garbled", GARBLED)
        if frame is not None:
            meta, arrays = frame
            kind = meta.get("kind")
            if stage == "load" and kind == "loaded":
                error = _clean_error(meta.get("error"))
                if first:
                    notes = meta.get("notes") if isinstance(meta.get("notes"), list) else []
                    out.frame({"kind": "loaded", "error": error, "notes": [_clean_error(x) for x in notes[:50]]})
                if error:
                    if not first:                      # a later loader could not load: the rest is lost
                        for exp in experiments[i:]:
                            out.frame({"kind": "result", "name": exp["name"], "meta": {}, "error": error})
                        i = len(experiments)
                    return i, True
                stage = "begin"
            elif stage == "begin" and kind == "done" and i == len(experiments):
                return i, True
            elif stage == "begin" and kind == "begin" and i < len(experiments) and meta.get("name") == experiments[i]["name"]:
                out.frame({"kind": "begin", "name": experiments[i]["name"]})
                stage, deadline = "result", time.monotonic() + per + 5.0
            elif stage == "result" and kind == "result" and meta.get("name") == experiments[i]["name"]:
                out.frame(_clean_result(meta, experiments[i]["name"]), arrays)
                i, stage = i + 1, "begin"
            else:
                failure = ("Garbled", GARBLED)
            if failure is None:
                continue
        if failure is None and eof:
            failure = _exit_failure(ns.status_of(pid))
        if failure is None and len(buf) > MAX_RESULT_BYTES:
            failure = ("OutputLimit", "returned more data than allowed")
        if failure is None:
            failure = ns.over()
        if failure is None and time.monotonic() > deadline:
            failure = ("Timeout", "")
        if failure is not None:
            break
        ready = select.select([r], [], [], WATCH_SECONDS)[0]
        ns.reap()
        if ready:
            data = _os.read(r, 1 << 20)
            eof = not data
            buf += data
    ns.end_all(pid)
    ns.status_of(pid)
    ns.reap()
    kind, message = failure
    err = {"type": kind, "message": message, "stage": "this check", "line": None}
    if stage == "load":
        if first:
            out.frame({"kind": "loaded", "error": dict(err, stage="loading your definitions"), "notes": []})
        else:
            for exp in experiments[i:]:
                out.frame({"kind": "result", "name": exp["name"], "meta": {}, "error": err})
            i = len(experiments)
        return i, True
    if i < len(experiments):
        if stage == "result":
            out.frame({"kind": "result", "name": experiments[i]["name"], "meta": {}, "error": err})
        else:                                          # between experiments: the next one was never begun
            out.frame({"kind": "begin", "name": experiments[i]["name"]})
            out.frame({"kind": "result", "name": experiments[i]["name"], "meta": {}, "error": err})
        i += 1
    return i, False


def _exit_failure(status):
    if _os.WIFSIGNALED(status):
        sig = _os.WTERMSIG(status)
        why = {9: "was killed (memory or CPU-time limit)", 24: "exceeded its CPU-time limit",
               11: "crashed (segmentation fault)"}
        return ("Killed", why.get(sig, f"was killed by signal {sig}"))
    return ("Exited", f"exited (status {_os.WEXITSTATUS(status)})")


def serve(request_fd, response_fd):
    """The monitor: from the judge's request to the last frame; never returns, never runs submission code."""
    blob = _read_all(request_fd, REQUEST_LIMIT)
    _os.close(request_fd)
    (request, tensors), = decode_frames(blob)
    del blob
    source = bytes(tensors.pop("__source__")).decode("utf-8", "replace")
    hide_from_peers()
    out = Recorder(response_fd)
    out.frame({"kind": "started", "confined": bool(request.get("namespaced"))})
    torch = _import_torch()
    prime_op_watch(torch)            # done in the fork server already, else here, before any submission code
    tensors = {k: torch.from_numpy(v) for k, v in tensors.items()}
    experiments = request["experiments"]
    ns = _Namespace(request["limits"], bool(request.get("namespaced")))
    i = 0
    for attempt in range(len(experiments) + LOADER_EXTRA_TRIES):
        r, w = _os.pipe()
        pid = _os.fork()
        if pid == 0:
            _os.close(r)
            _os.close(response_fd)
            _loader(request, source, tensors, torch, experiments[i:], w)
        _os.close(w)
        i, stop = _follow(pid, r, experiments, i, out, request["limits"], ns, first=attempt == 0)
        _os.close(r)
        if stop or i >= len(experiments):
            break
    for exp in experiments[i:]:
        out.frame({"kind": "result", "name": exp["name"], "meta": {},
                   "error": {"type": "Exited", "message": "ended too often", "stage": "this check", "line": None}})
    out.frame({"kind": "done"})
    _os._exit(0)
