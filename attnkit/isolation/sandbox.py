"""Run a submission's code in a child process the judge can always end, and trust nothing it writes.

The child is forked from a warm fork server (zygote.py), or, with ATTNKIT_ZYGOTE=0, from a fork
server started for that one submission: an interpreter started with ``-I -S`` (no
environment-driven imports, no current directory on its path, only the virtual environment's
site-packages appended by hand, so not even the kit's editable install).

Where the machine allows (user namespaces), each child lives in a private world of its own
(confine.py): a root holding only read-only binds of the system, the Python installation, the
virtual environment and the data it needs; its own /proc, and a size-capped tmpfs as /tmp, its
only writable place; new user, PID, network and IPC namespaces; an unprivileged uid outside
(``nobody`` when the grader is root); and, where the grader may make one, a cgroup capping the
memory and tasks of all its processes together (cgroup.py). Elsewhere it runs in an empty
scratch directory with the same resource limits, as ``ATTNKIT_CHILD_USER`` when the grader is
root, and its process group is killed at the end (docs/security.md, "The isolation model" and "The threat
table").

Everything between judge and child travels over pipes the judge makes before any submission code
exists, never over a path the child could replace: the request, the response (read with a size
cap and a deadline, decoded strictly), the status of its processes, the tail of its stderr.
"""
from __future__ import annotations

import functools
import json
import os
import pwd
import select
import shutil
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnkit import KIT_SOURCE
from attnkit.isolation import cgroup, framing, settings, zygote

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
RESPONSE_LIMIT = 128 * 1024 * 1024       # bytes a grading child may send back
NOTEBOOK_LIMIT = 32 * 1024 * 1024        # bytes of an executed notebook sent back by a kernel run
_namespaces_ok: bool | None = None
peak_child_rss_kib = 0        # largest child forked by a zygote so far


@dataclass
class Limits:
    wall_seconds: float = 60.0
    cpu_seconds: int = 60
    memory_mb: int = 4096
    seconds_per_experiment: int = 20
    seconds_per_statement: float = 5.0   # each module-level statement the child runs while loading
    max_processes: int = 64          # tasks (processes and threads) of the child together
    scratch_mb: int = 64             # its /tmp
    file_mb: int = 64                # any one file it writes


@dataclass
class ChildRun:
    frames: list = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    oversize: bool = False
    stderr_tail: str = ""
    seconds: float = 0.0


# The kit is on a child's path only while its own modules load, before any submission code exists: they
# are imported then, all of them (none imports another later), so nothing of the kit is read from disk
# afterwards (inside a private world the kit is not even there) and the submission's path is as before.
# No child writes bytecode into the kit (python -I ignores PYTHONDONTWRITEBYTECODE): the kit stays as its
# owner left it, e.g. compiled once by Gradescope's setup.sh and never written by grading.
_KIT_IMPORTS = """import sys
sys.dont_write_bytecode = True
sys.path.insert(0, {kit!r})
try:
{imports}
finally:
    sys.path.remove({kit!r})
"""


def kit_imports(*lines: str) -> str:
    """A program's opening: ``lines`` (import statements of the kit's child-side modules) run with the kit on
    the path, which is taken off again at once."""
    return _KIT_IMPORTS.format(kit=str(KIT_SOURCE), imports="\n".join("    " + line for line in lines))


@functools.lru_cache(maxsize=None)
def child_program(driver: Path, contract) -> str:
    """The program of a grading child: the child's modules (child_runtime, op_watch, confine, wire), then the
    assignment's driver, loaded from its file as a module of its own and handed to the runtime with what the
    student writes (``contract``: the manifest's [contract], config.Contract)."""
    return kit_imports("from attnkit.isolation import child_runtime, zygote_runtime",
                       f"child_runtime.use_driver(child_runtime.load_driver({str(driver)!r}), "
                       f"{contract.name!r}, {contract.kind!r})")


_ZYGOTE_BOOT = "import sys\nsys.path.extend(sys.argv[2:])\n"    # argv: control socket, site dirs


@functools.lru_cache(maxsize=None)
def zygote_program(child: str) -> str:
    """The fork server whose forks run ``child`` (a child_program) without paying its start-up."""
    return _ZYGOTE_BOOT + child + "\nzygote_runtime.zygote_main()\n"


def _site_dirs() -> list[str]:
    return [d for d in site.getsitepackages() if os.path.isdir(d)]


def _child_uid() -> tuple[int, int]:
    """Who the child is outside its namespaces when the grader is root (the overflow uid 65534 when
    the system has no `nobody`)."""
    try:
        user = pwd.getpwnam(settings.current().child_user or "nobody")
    except KeyError:
        if settings.current().child_user:
            raise
        return 65534, 65534
    return user.pw_uid, user.pw_gid


def world(tmp_mb: int, keep: tuple = (), ro_at: tuple = ()) -> dict:
    """What a child's private world shows: read-only binds of ``SYSTEM_DIRS``, the Python
    installation, the virtual environment and ``keep``; ``ro_at`` (host dir, path inside) pairs."""
    spec = {"ro": [*SYSTEM_DIRS, sys.base_prefix, sys.prefix, *_site_dirs(), *keep],
            "ro_at": [list(p) for p in ro_at], "tmp_mb": int(tmp_mb), "shm_mb": 64}
    if os.geteuid() == 0:
        spec["uid"], spec["gid"] = _child_uid()
    return spec


_PROBE = """
import json, os
world = json.loads(sys.argv[1])
build_world(world)
pid = os.fork()
if pid == 0:
    settle_world(world)
    os._exit(0)
os._exit(0 if os.waitpid(pid, 0)[1] == 0 else 3)
"""


def namespaces_available() -> bool:
    """Can this machine give a child its private world? Probed once, by building one for real."""
    global _namespaces_ok
    if _namespaces_ok is None:
        if not settings.current().namespaces:
            _namespaces_ok = False
        else:
            program = kit_imports("from attnkit.isolation.confine import build_world, settle_world") + _PROBE
            try:
                _namespaces_ok = subprocess.run([sys.executable, "-I", "-S", "-c", program, json.dumps(world(1))],
                                                capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                                                cwd="/").returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                _namespaces_ok = False
    return _namespaces_ok


def _child_env() -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0",
            **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_CORETYPE")}}


def remove_tree(path: str) -> None:
    """Delete ``path`` however deep or strange what is inside (rm is iterative; rmtree recursive)."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", path], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def run_child(program: str, request: dict, tensors: dict[str, np.ndarray], limits: Limits) -> ChildRun:
    """Run ``program`` (a child_program) on ``request``; return the frames it sent back, decoded strictly."""
    namespaced = namespaces_available()
    request = dict(request)
    source = request.pop("source")
    run_as = settings.current().child_user if not namespaced and os.geteuid() == 0 else None
    scratch = None
    job: dict = {"world": None}
    if namespaced:
        job["world"] = world(limits.scratch_mb)
    else:
        scratch = job["scratch"] = tempfile.mkdtemp(prefix="attnkit-child-")
        if run_as:                                   # no namespaces, but root: the child gives root up
            user = pwd.getpwnam(run_as)
            os.chown(scratch, user.pw_uid, user.pw_gid)
    group = cgroup.create(limits.memory_mb + 256, limits.max_processes + 16)
    if group and job["world"] is not None:
        job["world"]["cgroups"] = group.procs
    payload = dict(tensors, __source__=np.frombuffer(source.encode("utf-8"), dtype=np.uint8))
    blob = framing.encode_frame(dict(request, limits=limits.__dict__, namespaced=namespaced, run_as=run_as), payload)
    run = ChildRun()
    start = time.monotonic()
    try:
        out = _run_warm_or_fresh(program, job, blob, limits.wall_seconds)
    finally:
        if group:
            group.close()
        if scratch:
            remove_tree(scratch)
    run.seconds = time.monotonic() - start
    global peak_child_rss_kib
    peak_child_rss_kib = max(peak_child_rss_kib, out.peak_kib)
    run.returncode, run.timed_out, run.oversize = out.returncode, out.timed_out, out.oversize
    run.stderr_tail = out.stderr_tail.decode("utf-8", "replace")
    try:
        run.frames = framing.decode_frames(bytes(out.response))
    except framing.WireError as e:
        # the frames before the one the judge cannot read stand, as a truncated stream's do: the monitor's own
        # ("started" first, before any submission code) are always readable, but a result it forwards may not be
        # (a nesting its json read took and the judge's, deeper in its stack, does not). Were they all dropped, no
        # "started" would be seen, a fault of the kit: given back by the check service, a free check the
        # submission could steer (tests/test_attack_serve4.py)
        run.frames = getattr(e, "frames", [])
    return run


def prestart(driver: Path, contract):
    """Start the fork server for ``driver``'s children now, so that its imports overlap the caller's.

    Returns it (call ``ensure_ready()`` before forking processes that should share it), or None.
    """
    return _zygote(child_program(driver, contract)) if zygote.enabled() else None


def _zygote(program: str) -> "zygote.Zygote":
    """The fork server for ``program``'s children, started with a fresh child's interpreter flags and environment."""
    return zygote.zygote_for(zygote_program(program), _site_dirs(), _child_env())


def _run_warm_or_fresh(program, job, request: bytes, timeout) -> "zygote.Outcome":
    """Fork the child from the shared zygote; without one (ATTNKIT_ZYGOTE=0), from one of its own."""
    if zygote.enabled():
        try:
            return _zygote(program).run(job, request, timeout, RESPONSE_LIMIT)
        except zygote.ZygoteGone:
            pass
    own = zygote.Zygote(zygote_program(program), _site_dirs(), _child_env())
    try:
        return own.run(job, request, timeout, RESPONSE_LIMIT)
    finally:
        own.close()


def runner_program() -> str:
    return kit_imports("from attnkit.isolation import notebook_runner") + "notebook_runner.main()\n"


def run_notebook(nb, folder: str, cell_timeout: int, budget_seconds: float, memory_mb: int, log=None,
                 data_dir: str | None = None):
    """Execute notebook ``nb`` (whose files live in ``folder``) in a real kernel in a confined child; the kernel
    reads the corpora from ``data_dir`` (default: $ATTNKIT_DATA_DIR), bound read-only into its world.

    Returns the executed notebook as untrusted JSON (a dict, at most NOTEBOOK_LIMIT bytes, sent
    over a pipe), or None when the run did not finish or sent back something else. The grades
    never depend on it: the caller takes only outputs of non-grade cells from it.
    """
    import nbformat
    scratch = tempfile.mkdtemp(prefix="attnkit-nb-")
    inbox = os.path.join(scratch, "in")
    os.makedirs(inbox)
    _copy_folder(folder, os.path.join(inbox, "work"), log)
    nbformat.write(nb, os.path.join(inbox, "in.ipynb"))
    data_dir = data_dir or os.environ.get("ATTNKIT_DATA_DIR")
    keep = (os.path.realpath(data_dir),) if data_dir and os.path.isdir(data_dir) else ()
    namespaced = namespaces_available()
    spec = {"inbox": "/run/attnkit-in" if namespaced else inbox, "cell_timeout": cell_timeout,
            "memory_mb": memory_mb, "file_mb": 64, "max_processes": 256, "world": None}
    group = None
    if namespaced:
        spec["world"] = world(512, keep=keep, ro_at=((inbox, "/run/attnkit-in"),))
        if os.geteuid() == 0:                        # the child's user must be able to read its inbox
            uid, gid = spec["world"]["uid"], spec["world"]["gid"]
            for d, _, files in os.walk(scratch):
                os.chown(d, uid, gid)
                for f in files:
                    os.chown(os.path.join(d, f), uid, gid)
        group = cgroup.create(memory_mb + 512, 512)
        if group:
            spec["world"]["cgroups"] = group.procs
    else:
        spec["workdir"] = os.path.join(inbox, "work")
    env = dict(_child_env(), PATH=f"{os.path.dirname(sys.executable)}:/usr/bin:/bin")
    env.pop("MPLBACKEND")                      # the kernel's inline backend: figures reach the feedback
    if not namespaced:
        env.update(HOME=scratch, TMPDIR=scratch)
    if data_dir:
        env["ATTNKIT_DATA_DIR"] = data_dir
    out_r, out_w = os.pipe()
    spec["out_fd"] = out_w
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-c", runner_program(), json.dumps(spec)], cwd="/",
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=[out_w], start_new_session=True)
    finally:
        os.close(out_w)
    data, timed_out, oversize = _read_pipe(out_r, NOTEBOOK_LIMIT, budget_seconds)
    try:
        os.killpg(proc.pid, 9)                       # the runner, and with it PID 1 of its namespace
    except ProcessLookupError:
        pass
    proc.wait()
    if group:
        group.close()
    remove_tree(scratch)
    if timed_out and log:
        log(f"the notebook did not finish within {budget_seconds:g} s; its outputs are not shown")
    elif oversize and log:
        log(f"the executed notebook is larger than {NOTEBOOK_LIMIT // 2**20} MB; its outputs are not shown")
    if timed_out or oversize or not data:
        return None
    try:
        executed = json.loads(data)
    except (ValueError, RecursionError):
        executed = None
    if not isinstance(executed, dict):
        if log:
            log("the executed notebook could not be read back; keeping the submitted one")
        return None
    return executed


def _copy_folder(src: str, dst: str, log=None) -> None:
    """The submission's folder for the kernel's working directory: regular files and folders only
    (no link followed, no FIFO or device opened), capped, without notebooks and hidden files."""
    from attnkit.isolation.files import copy_tree
    copy_tree(src, dst, skip=("*.ipynb", ".*"), log=log)


def _read_pipe(fd: int, limit: int, timeout: float) -> tuple[bytes, bool, bool]:
    """Read ``fd`` to its end, at most ``limit`` bytes and ``timeout`` s. Returns (data, timed out, too large)."""
    buf = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(buf), True, False
            if not select.select([fd], [], [], left)[0]:
                continue
            data = os.read(fd, 1 << 20)
            if not data:
                return bytes(buf), False, False
            buf += data
            if len(buf) > limit:
                return b"", False, True
    finally:
        os.close(fd)
