"""Run a submission's code in a child process the judge can always end.

The child is a fresh ``python -I -S``: no environment-driven imports, no
current directory or course directory on its path, only the virtual
environment's packages appended by hand (no .pth files, so not even the kit's
own editable install). It works in an empty scratch directory with a scrubbed
environment, and all it can hand back is wire frames.

Where the machine allows unprivileged namespaces (`unshare`), the child also
gets its own user, mount, network and PID namespaces: no network, the course
directory replaced by an empty tmpfs, every other mount read-only except the
scratch directory, and every process it starts dies with it. Elsewhere the
process group is killed at the end and the rest of that protection is absent
(see README, "What the autograder protects against").
"""
from __future__ import annotations

import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import wire

HERE = Path(__file__).resolve().parent
KIT_ROOT = HERE.parent
NAMESPACES = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child"]
_namespaces_ok: bool | None = None


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


def child_program(driver: Path) -> str:
    # argv: request, response, then the site-packages directories to append before any import
    boot = "import sys\nsys.path.extend(sys.argv[3:])\n"
    parts = [HERE / "wire.py", HERE / "child_runtime.py", driver]
    return boot + "\n\n".join(p.read_text() for p in parts) + "\n\nmain()\n"


def _hidden_dirs(scratch: str) -> list[str]:
    """The course (and the grader's working and home directories) unless Python itself lives there."""
    needed = [scratch, sys.base_prefix, os.path.realpath(sys.base_prefix)]
    hide = []
    for d in dict.fromkeys([str(KIT_ROOT), os.getcwd(), os.path.expanduser("~")]):
        d = os.path.realpath(d)
        if d != "/" and os.path.isdir(d) and not any(n == d or n.startswith(d + os.sep) for n in needed):
            hide.append(d)
    return hide


def _site_dirs() -> list[str]:
    return [d for d in site.getsitepackages() if os.path.isdir(d)]


def _child_env(scratch: str) -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0",
            **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_CORETYPE")}}


def run_child(program: str, request: dict, tensors: dict[str, np.ndarray], limits: Limits) -> ChildRun:
    scratch = tempfile.mkdtemp(prefix="attnkit-child-")
    req, resp = os.path.join(scratch, ".request"), os.path.join(scratch, ".response")
    confine = None
    prefix = []
    if namespaces_available():
        prefix = NAMESPACES
        confine = {"scratch": scratch, "venv": sys.prefix, "hide": _hidden_dirs(scratch)}
    with open(req, "wb") as f:
        f.write(wire.encode_frame(dict(request, limits=limits.__dict__, confine=confine), tensors))
    cmd = prefix + [sys.executable, "-I", "-S", "-c", program, req, resp, *_site_dirs()]
    run = ChildRun()
    start = time.monotonic()
    with open(os.path.join(scratch, ".stderr"), "wb") as err:
        proc = subprocess.Popen(cmd, cwd=scratch, env=_child_env(scratch), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            run.returncode = proc.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            run.timed_out = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)      # the child and anything it started
            except ProcessLookupError:
                pass
            proc.wait()
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
