"""The fork server ("zygote") that pays Python's and torch's start-up once.

Not imported by the judge: zygote.py starts ``python -I -S -c PROGRAM`` where PROGRAM is the
child's program (sandbox.child_program: this module, child_runtime and the assignment's driver
imported) and a call of ``zygote_main``. The zygote imports torch, then waits on
its control socket. Each message is one submission: a JSON job and, passed alongside it, four
pipe ends the judge made (status, request, response, stderr). For each it forks a fresh
process that never returns to the zygote:

    zygote ── fork ──> submission process S (own session; builds the private world:
                       confine.build_world, then new user, PID, network and IPC namespaces)
                         └─ fork ──> PID 1 of the new namespaces, the monitor M
                                     (confine.settle_world, then child_runtime.serve: reads the
                                     request, forks the loader that runs the submission's code)

S writes its pid, the pid of M (as the judge sees it), then the wait status of M and the peak
memory (KiB) of the processes it waited for, on the status pipe, so the judge can time it out
and kill the whole group. The zygote itself never runs submission code, so every submission
starts from the same clean, warm state.
"""
import array as _fd_array
import json as _json
import os as _os
import resource as _resource
import signal as _signal
import socket as _socket
import sys as _sys
import traceback as _traceback

from attnkit.isolation.child_runtime import _import_torch, serve
from attnkit.isolation import linux
from attnkit.isolation.confine import build_world, settle_world
from attnkit.isolation.op_watch import prime_op_watch


def _submission_process(job, fds):
    """Forked from the zygote; ends with os._exit, never returns to the zygote's loop.

    ``fds``: the status pipe (write), the request (read), the response (write) and the stderr of
    the grading process (write), all created by the judge before anything of the submission ran.
    """
    status_fd, request_fd, response_fd, stderr_fd = fds
    code = 1
    try:
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        _os.setsid()
        keep = sorted(fds)
        for lo, hi in zip([3] + [k + 1 for k in keep], keep + [1 << 16]):
            if lo < hi:
                _os.closerange(lo, hi)              # the control socket and anything else inherited
        _os.write(status_fd, f"{_os.getpid()}\n".encode())
        null = _os.open(_os.devnull, _os.O_RDWR)
        for fd, target in ((0, null), (1, null), (2, stderr_fd)):
            _os.dup2(target, fd)
        _os.close(null)
        _os.close(stderr_fd)
        if job.get("world"):
            build_world(job["world"])
        parent = _os.getpid()
        pid = _os.fork()
        if pid == 0:
            linux.die_with_parent(_signal.SIGKILL)       # die with the submission process
            if not job.get("world") and _os.getppid() != parent:
                _os._exit(1)
            _os.close(status_fd)
            try:
                if job.get("world"):
                    settle_world(job["world"])
                else:
                    _os.chdir(job["scratch"])
                    _os.environ.update(HOME=job["scratch"], TMPDIR=job["scratch"])
                import tempfile
                tempfile.tempdir = None
                serve(request_fd, response_fd)
            except BaseException:  # noqa: BLE001 - a fault of the kit: its traceback goes to the judge
                _traceback.print_exc()
                _sys.stderr.flush()
            _os._exit(1)
        _os.close(request_fd)
        _os.close(response_fd)
        _os.write(status_fd, f"{pid}\n".encode())   # PID 1 may leave our group and outlive us: the judge kills it
        _, status = _os.waitpid(pid, 0)
        peak_kib = _resource.getrusage(_resource.RUSAGE_CHILDREN).ru_maxrss
        _os.write(status_fd, f"{status}\n{peak_kib}\n".encode())
        code = 0
    except BaseException:  # noqa: BLE001
        _traceback.print_exc()
    _os._exit(code)


# Imported once here rather than by every submission: what the course's notebooks import
# (matplotlib alone costs about 0.3 s). Only libraries of the virtual environment, never
# submission code.
WARM_IMPORTS = ("math", "json", "numpy", "torch.nn.functional", "matplotlib", "matplotlib.pyplot")


def _warm_torch(torch):
    """Run once each kind of operation the checks run, so every fork starts with torch's lazy set-up
    done (a first matmul, softmax or backward in a fresh process costs milliseconds). No threads
    are started: torch runs single-threaded here and CPU autograd runs on the calling thread."""
    x = torch.randn(2, 4, 8, requires_grad=True)                      # (B, T, d)
    lin = torch.nn.Linear(8, 8, bias=False)
    q = lin(x)                                                        # (B, T, d)
    w = (q @ q.transpose(-2, -1) * 0.5).masked_fill(torch.tril(torch.ones(4, 4)) == 0, float("-inf"))
    out = torch.nn.functional.softmax(w, dim=-1) @ q                  # (B, T, d)
    loss = torch.nn.functional.cross_entropy(out.reshape(8, 8), torch.zeros(8, dtype=torch.long))
    loss.backward()
    torch.optim.AdamW(lin.parameters(), lr=1e-3).step()


def zygote_main():
    control = _socket.socket(fileno=int(_sys.argv[1]))
    import importlib
    torch = _import_torch()
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing library is the submission's note, as without a zygote
            pass
    _warm_torch(torch)
    prime_op_watch(torch)                               # every child inherits the stand-ins
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)    # submission processes reap themselves
    control.sendall(b"ready")
    while True:
        fds = _fd_array.array("i")
        try:
            msg, ancdata, _, _ = control.recvmsg(1 << 16, _socket.CMSG_SPACE(4 * fds.itemsize))
        except InterruptedError:
            continue
        except OSError:                                 # e.g. reset by a judge that died
            msg = b""
        if not msg:                                     # the judge has gone: so do we, and our home
            import shutil
            shutil.rmtree(_os.getcwd(), ignore_errors=True)
            _os._exit(0)
        for level, kind, data in ancdata:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        if len(fds) != 4:
            for fd in fds:
                _os.close(fd)
            continue
        job = _json.loads(msg)
        if _os.fork() == 0:
            _submission_process(job, list(fds))
        for fd in fds:
            _os.close(fd)
