"""Run a submission's code in a child process the judge can always end.

The child is forked from a warm fork server (zygote.py) or, without one, is a fresh
``python -I -S``; either way an interpreter started with no environment-driven imports, no
current directory or course directory on its path, only the virtual environment's packages
appended by hand (no .pth files, so not even the kit's own editable install). It works in an
empty scratch directory with a scrubbed environment, and all it can hand back is wire frames.

Where the machine allows unprivileged namespaces (`unshare`), the child also
gets its own user, mount, network and PID namespaces: no network, the course
directory replaced by an empty tmpfs, every other mount read-only except the
scratch directory, and every process it starts dies with it. Elsewhere the
process group is killed at the end and the rest of that protection is absent
(see README, "What the autograder protects against").
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import site
import subprocess
import sys
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import wire, zygote

HERE = Path(__file__).resolve().parent
KIT_ROOT = HERE.parent
NAMESPACES = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child"]
_namespaces_ok: bool | None = None
peak_child_rss_kib = 0        # largest child forked by a zygote so far (fresh children: see RUSAGE_CHILDREN)


def namespaces_available() -> bool:
    """Can this machine give the child its own user/mount/net/pid namespaces? (probed once)"""
    global _namespaces_ok
    if _namespaces_ok is None:
        if os.environ.get("ATTNKIT_NO_NAMESPACES") or not shutil.which("unshare"):
            _namespaces_ok = False
        else:
            try:
                _namespaces_ok = subprocess.run(NAMESPACES + ["true"], capture_output=True, timeout=10).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                _namespaces_ok = False
    return _namespaces_ok


@dataclass
class Limits:
    wall_seconds: float = 60.0
    cpu_seconds: int = 60
    memory_mb: int = 4096
    seconds_per_experiment: int = 20


@dataclass
class ChildRun:
    frames: list = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    stderr_tail: str = ""
    seconds: float = 0.0


_CHILD_BOOT = "import sys\nsys.path.extend(sys.argv[3:])\n"     # argv: request, response, site dirs
_ZYGOTE_BOOT = "import sys\nsys.path.extend(sys.argv[2:])\n"    # argv: control socket, site dirs
_CHILD_ENTRY = "\n\nmain()\n"


@functools.lru_cache(maxsize=None)
def child_program(driver: Path) -> str:
    """The whole program of a grading child: the site dirs appended before any import, then its runtime."""
    parts = [HERE / "wire.py", HERE / "confine.py", HERE / "child_runtime.py", driver]
    return _CHILD_BOOT + "\n\n".join(p.read_text() for p in parts) + _CHILD_ENTRY


@functools.lru_cache(maxsize=None)
def zygote_program(child: str) -> str:
    """The fork server whose forks run ``child`` (a child_program) without paying its start-up."""
    runtime = child.removeprefix(_CHILD_BOOT).removesuffix(_CHILD_ENTRY)
    return _ZYGOTE_BOOT + runtime + "\n\n" + (HERE / "zygote_runtime.py").read_text() + "\n\nzygote_main()\n"


def _hidden_dirs(scratch: str) -> list[str]:
    """The course (and the grader's working and home directories) unless Python itself lives there.

    A directory inside another hidden one is dropped: hiding the outer one hides it already.
    """
    needed = [scratch, sys.base_prefix, os.path.realpath(sys.base_prefix)]
    hide = []
    for d in dict.fromkeys([str(KIT_ROOT), os.getcwd(), os.path.expanduser("~")]):
        d = os.path.realpath(d)
        if d != "/" and os.path.isdir(d) and not any(n == d or n.startswith(d + os.sep) for n in needed):
            hide.append(d)
    return [d for d in hide if not any(d != o and d.startswith(o + os.sep) for o in hide)]


def confinement(scratch: str, keep: tuple = ()) -> dict:
    """What the child's mount namespace hides (the course) and keeps visible read-only (the venv, data)."""
    return {"scratch": scratch, "keep": [sys.prefix, *keep], "hide": _hidden_dirs(scratch)}


def _site_dirs() -> list[str]:
    return [d for d in site.getsitepackages() if os.path.isdir(d)]


def _child_env(scratch: str) -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0",
            **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_CORETYPE")}}


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def _run_group(cmd, cwd, env, stdout, stderr, timeout: float) -> tuple[int | None, bool]:
    """Run ``cmd`` in its own session; when it ends or times out, kill everything it started.

    Returns (exit status or None, timed out).
    """
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                            start_new_session=True)
    returncode, timed_out = None, False
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        for pid in _children(proc.pid):              # e.g. PID 1 under `unshare`, which may have left the group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)      # the child and anything it started
        except ProcessLookupError:
            pass
        proc.wait()
    return returncode, timed_out


def run_child(program: str, request: dict, tensors: dict[str, np.ndarray], limits: Limits) -> ChildRun:
    scratch = tempfile.mkdtemp(prefix="attnkit-child-")
    req, resp = os.path.join(scratch, ".request"), os.path.join(scratch, ".response")
    confine = None
    prefix = []
    if namespaces_available():
        prefix = NAMESPACES
        confine = confinement(scratch)
    run_as = os.environ.get("ATTNKIT_CHILD_USER") if not confine and os.geteuid() == 0 else None
    if run_as:                                   # no namespaces, but root: the child gives root up
        import pwd
        user = pwd.getpwnam(run_as)
        os.chown(scratch, user.pw_uid, user.pw_gid)
    with open(req, "wb") as f:
        f.write(wire.encode_frame(dict(request, limits=limits.__dict__, confine=confine, run_as=run_as), tensors))
    run = ChildRun()
    start = time.monotonic()
    run.returncode, run.timed_out, peak = _run_warm_or_fresh(program, scratch, req, resp, prefix, limits.wall_seconds)
    global peak_child_rss_kib
    peak_child_rss_kib = max(peak_child_rss_kib, peak)
    run.seconds = time.monotonic() - start
    try:
        with open(resp, "rb") as f:
            run.frames = wire.decode_frames(f.read(16 * 1024 * 1024))
    except (OSError, wire.WireError):
        run.frames = []
    with open(os.path.join(scratch, ".stderr"), "rb") as f:
        run.stderr_tail = f.read()[-2000:].decode("utf-8", "replace")
    shutil.rmtree(scratch, ignore_errors=True)
    return run


def prestart(driver: Path):
    """Start the fork server for ``driver``'s children now, so that its imports overlap the caller's.

    Returns it (call ``ensure_ready()`` before forking processes that should share it), or None.
    """
    return _zygote(child_program(driver)) if zygote.enabled() else None


def _zygote(program: str) -> "zygote.Zygote":
    """The fork server for ``program``'s children, started with a fresh child's interpreter flags and environment."""
    return zygote.zygote_for(zygote_program(program), _site_dirs(), _child_env("/"))


def _run_warm_or_fresh(program, scratch, req, resp, prefix, timeout) -> tuple[int | None, bool, int]:
    """Fork the child from the zygote; start a fresh interpreter if there is none.

    Returns (exit status, timed out, peak memory of the child in KiB or 0 when the
    resource usage of this process's children already counts it)."""
    stderr = os.path.join(scratch, ".stderr")            # a submission's prints go nowhere
    if zygote.enabled():
        job = {"scratch": scratch, "request": req, "response": resp, "stderr": stderr,
               "namespaces": bool(prefix)}
        try:
            return _zygote(program).run(job, timeout)
        except zygote.ZygoteGone:
            pass
    cmd = prefix + [sys.executable, "-I", "-S", "-c", program, req, resp, *_site_dirs()]
    with open(stderr, "wb") as err:
        return *_run_group(cmd, scratch, _child_env(scratch), subprocess.DEVNULL, err, timeout), 0


def run_notebook(nb, folder: str, cell_timeout: int, budget_seconds: float, memory_mb: int, log=None):
    """Execute notebook ``nb`` (whose files live in ``folder``) in a confined child; return the executed copy.

    On a timeout of the whole notebook or a crash, return ``nb`` as it was: the grades never depend
    on this run (the judge decides them), only the outputs students see do.
    """
    import nbformat
    scratch = tempfile.mkdtemp(prefix="attnkit-nb-")
    work = os.path.join(scratch, "work")
    shutil.copytree(folder, work, symlinks=True, ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    for d in ("runtime", "ipython", "mpl"):
        os.makedirs(os.path.join(scratch, d))
    spec = {"in": os.path.join(scratch, "in.ipynb"), "out": os.path.join(scratch, "out.ipynb"), "workdir": work,
            "cell_timeout": cell_timeout, "memory_mb": memory_mb, "confine": None}
    nbformat.write(nb, spec["in"])
    data_dir = os.environ.get("ATTNKIT_DATA_DIR")
    prefix = []
    if namespaces_available():
        prefix = NAMESPACES
        spec["confine"] = confinement(scratch, keep=(os.path.realpath(data_dir),) if data_dir and os.path.isdir(data_dir) else ())
    env = dict(_child_env(scratch), JUPYTER_RUNTIME_DIR=os.path.join(scratch, "runtime"),
               IPYTHONDIR=os.path.join(scratch, "ipython"), MPLCONFIGDIR=os.path.join(scratch, "mpl"),
               PATH=f"{os.path.dirname(sys.executable)}:/usr/bin:/bin")
    env.pop("MPLBACKEND")                      # the kernel's inline backend: figures reach the feedback
    if data_dir:
        env["ATTNKIT_DATA_DIR"] = data_dir
    program = (HERE / "confine.py").read_text() + "\n\n" + (HERE / "notebook_runner.py").read_text() + "\n\nmain()\n"
    with open(os.path.join(scratch, ".log"), "wb") as out:
        _, timed_out = _run_group(prefix + [sys.executable, "-I", "-c", program, json.dumps(spec)], work, env,
                                  out, out, budget_seconds)
    if timed_out and log:
        log(f"the notebook did not finish within {budget_seconds:g} s; its outputs are not shown")
    try:
        if os.path.getsize(spec["out"]) > 200 * 1024 * 1024:
            raise ValueError("executed notebook too large")
        executed = nbformat.read(spec["out"], as_version=4)
    except (OSError, ValueError) as e:
        if log:
            log(f"the executed notebook could not be read back ({e}); keeping the submitted one")
        executed = nb
    shutil.rmtree(scratch, ignore_errors=True)
    return executed
