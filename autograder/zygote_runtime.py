"""Program fragment: the fork server ("zygote") that pays Python's and torch's start-up once.

Not imported by the judge: zygote.py starts ``python -I -S -c PROGRAM`` where PROGRAM is
wire.py + confine.py + child_runtime.py + the assignment's driver + this file. The zygote
imports torch, then waits on its control socket. Each message is one submission: a JSON job
and, passed alongside it, the write end of a status pipe. For each it forks a fresh
process that never returns to the zygote:

    zygote ── fork ──> submission process (own session; new user, mount, network and
                       PID namespaces where the machine allows)
                         └─ fork ──> PID 1 of the new namespace: confines itself and
                                     runs child_runtime.serve (the submission's code)

The submission process writes its pid, the pid of PID 1 (as the judge sees it), then the wait
status of PID 1 and the peak memory (KiB) of the processes it waited for, on the status pipe,
so the judge can time it out and kill the whole group. The zygote itself never runs
submission code, so every submission starts from the same clean, warm state.
"""
import array as _fd_array
import ctypes as _ctypes
import socket as _socket


def _enter_namespaces(libc):
    """Own user (root mapped to our uid), mount, network and PID namespaces, as `unshare` would."""
    CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x20000000, 0x40000000
    _new_user_namespace(libc, 0, CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET)      # from confine.py


def _open_std(stderr_path):
    """Opened before entering the new mount namespace: a file open for writing there would keep
    its mount from being made read-only."""
    return (_os.open(_os.devnull, _os.O_RDWR),
            _os.open(stderr_path, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC, 0o600))


def _redirect_std(null, err):
    for fd, target in ((0, null), (1, null), (2, err)):
        _os.dup2(target, fd)
    _os.close(null)
    _os.close(err)


def _submission_process(job, status_fd):
    """Forked from the zygote; ends with os._exit, never returns to the zygote's loop."""
    code = 1
    try:
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        _os.setsid()
        _os.closerange(3, status_fd)                # the control socket and anything else inherited
        _os.closerange(status_fd + 1, 1 << 16)
        _os.write(status_fd, f"{_os.getpid()}\n".encode())
        libc = _ctypes.CDLL(None, use_errno=True)
        std = _open_std(job["stderr"])
        if job["namespaces"]:
            _enter_namespaces(libc)
        parent = _os.getpid()
        pid = _os.fork()
        if pid == 0:
            libc.prctl(1, _signal.SIGKILL, 0, 0, 0)      # PR_SET_PDEATHSIG: die with the submission process
            if not job["namespaces"] and _os.getppid() != parent:
                _os._exit(1)
            _os.close(status_fd)
            _redirect_std(*std)
            _os.chdir(job["scratch"])
            _os.environ.update(HOME=job["scratch"], TMPDIR=job["scratch"])
            import tempfile
            tempfile.tempdir = None
            try:
                serve(job["request"], job["response"])
            except BaseException:  # noqa: BLE001 - a fault of the kit: its traceback goes to the judge
                _traceback.print_exc()
                _sys.stderr.flush()
            _os._exit(1)
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
    torch = _import_torch()                             # from child_runtime.py
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing library is the submission's note, as without a zygote
            pass
    _warm_torch(torch)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)    # submission processes reap themselves
    control.sendall(b"ready")
    while True:
        fds = _fd_array.array("i")
        try:
            msg, ancdata, _, _ = control.recvmsg(1 << 16, _socket.CMSG_SPACE(fds.itemsize))
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
        if len(fds) != 1:
            for fd in fds:
                _os.close(fd)
            continue
        job = _json.loads(msg)
        if _os.fork() == 0:
            _submission_process(job, fds[0])
        _os.close(fds[0])
