"""Run a submission's code in a child process the judge can always end.

The child is a fresh ``python -I -S``: no environment-driven imports, no
current directory or course directory on its path, only the virtual
environment's packages appended by hand (no .pth files, so not even the kit's
own editable install). It works in an empty scratch directory, its whole
process group is killed when grading ends, and all it can hand back is wire
frames.
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
    with open(req, "wb") as f:
        f.write(wire.encode_frame(dict(request, limits=limits.__dict__), tensors))
    cmd = [sys.executable, "-I", "-S", "-c", program, req, resp, *_site_dirs()]
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
