"""Judge side of the fork server: one warm zygote per grading process and assignment.

Starting a fresh Python that imports torch costs about 1.5 s; forking a process that already
has costs milliseconds. The zygote (zygote_runtime.py) is started once, with the same
scrubbed environment and interpreter flags as a fresh child, and forks one confined process
per submission. It never runs submission code itself, so isolation is what a fresh child
gets: its own namespaces, confinement, limits and process group, killed at the end.

Set ATTNKIT_ZYGOTE=0 to start a fresh interpreter per submission instead.
"""
from __future__ import annotations

import array
import atexit
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from attnkit.isolation import settings

_zygotes: dict[str, "Zygote"] = {}
_lock = threading.Lock()


class ZygoteGone(RuntimeError):
    """The fork server is not there to take the job (it died, or never started)."""


class Zygote:
    def __init__(self, program: str, argv_tail: list[str], env: dict):
        self.home = tempfile.mkdtemp(prefix="attnkit-zygote-")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(os.path.join(self.home, ".stderr"), "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", program, str(theirs.fileno()), *argv_tail],
                cwd=self.home, env=dict(env, HOME=self.home, TMPDIR=self.home), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err, pass_fds=[theirs.fileno()], start_new_session=True)
        theirs.close()
        self.sock, self.send_lock, self.ready, self.owner = ours, threading.Lock(), False, os.getpid()

    def ensure_ready(self) -> None:
        """Wait for the zygote's imports to finish (once; before forking processes that share it)."""
        with self.send_lock:
            if self.ready:
                return
            self.sock.settimeout(120)
            try:
                ready = self.sock.recv(16)
            except OSError:
                ready = b""
            self.sock.settimeout(None)
            if ready != b"ready":
                raise ZygoteGone(f"the fork server did not start: {self.stderr_tail()}")
            self.ready = True

    def stderr_tail(self) -> str:
        try:
            with open(os.path.join(self.home, ".stderr"), "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        if self.owner == os.getpid():
            return self.proc.poll() is None
        try:                                # a process forked from the owner shares the zygote
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def run(self, job: dict, request: bytes, timeout: float, response_limit: int) -> "Outcome":
        """Fork one submission process for ``job``, hand it ``request``, collect its response.

        Every channel is a pipe made here, before anything of the submission exists: the status
        pipe (pids, wait status, peak memory), the request, the response (read up to
        ``response_limit`` bytes) and the grading process's stderr (its tail kept). Waits up to
        ``timeout`` s, then kills PID 1 of the child's namespace and the submission's group.
        Raises ZygoteGone when the job never started.
        """
        self.ensure_ready()
        pipes = [os.pipe() for _ in range(4)]              # status, request, response, stderr
        theirs = [pipes[0][1], pipes[1][0], pipes[2][1], pipes[3][1]]
        status_r, req_w, resp_r, err_r = pipes[0][0], pipes[1][1], pipes[2][0], pipes[3][0]
        try:
            with self.send_lock:
                self.sock.sendmsg([json.dumps(job).encode()],
                                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))])
        except OSError as e:
            for fd in (status_r, req_w, resp_r, err_r):
                os.close(fd)
            raise ZygoteGone(f"the fork server is gone ({e})") from None
        finally:
            for fd in theirs:
                os.close(fd)
        out = Outcome()
        try:
            _exchange(out, status_r, req_w, resp_r, err_r, request, timeout, response_limit, self.alive)
        finally:
            if len(out.lines) > 1:    # PID 1 of the namespace: all in it die with it, even a process that
                _kill(os.kill, out.lines[1])    # left the group and cleared its parent-death signal
            if out.lines:
                _kill(os.killpg, out.lines[0])  # the submission process and its group
        if not out.lines:
            if out.timed_out:
                return out
            raise ZygoteGone(f"the fork server did not take the job: {self.stderr_tail()}")
        if len(out.lines) >= 4:
            status = out.lines[2]
            out.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
            out.peak_kib = out.lines[3]
        return out

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.owner != os.getpid():
            return                          # the owner ends it; for us, closing our socket is enough
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        import shutil
        shutil.rmtree(self.home, ignore_errors=True)


class Outcome:
    """What one submission process left: its exit status, whether it timed out, its response bytes."""

    def __init__(self):
        self.lines: list[int] = []
        self.returncode: int | None = None
        self.timed_out = False
        self.oversize = False
        self.peak_kib = 0
        self.response = bytearray()
        self.stderr_tail = b""


STDERR_TAIL = 4000


def _exchange(out, status_r, req_w, resp_r, err_r, request, timeout, limit, alive) -> None:
    """Write the request, read the response, the stderr tail and the status lines, until the
    child is done or ``timeout`` s have passed; closes the four fds."""
    os.set_blocking(req_w, False)
    view = memoryview(request)
    readers = {status_r, resp_r, err_r}
    status_buf = b""
    deadline = time.monotonic() + timeout
    try:
        while readers - {err_r} or view:
            left = deadline - time.monotonic()
            if left <= 0:
                out.timed_out = True
                return
            writers = [req_w] if view else []
            rs, ws, _ = select.select(list(readers), writers, [], min(left, 5.0))
            if not rs and not ws:
                if not out.lines and not alive():
                    return
                continue
            if ws:
                try:
                    view = view[os.write(req_w, view[:1 << 16]):]
                except BlockingIOError:
                    pass
                except OSError:                  # the child is gone before reading it all
                    view = view[:0]
                if not view:
                    os.close(req_w)
                    req_w = None
            for fd in rs:
                data = os.read(fd, 1 << 20)
                if not data:
                    readers.discard(fd)
                elif fd == resp_r:
                    out.response += data
                    if len(out.response) > limit:
                        out.oversize = True
                        return
                elif fd == err_r:
                    out.stderr_tail = (out.stderr_tail + data)[-STDERR_TAIL:]
                else:
                    status_buf += data
                    *done, status_buf = status_buf.split(b"\n")
                    out.lines += [int(x) for x in done if x.strip().lstrip(b"-").isdigit()]
            if status_r not in readers and len(out.lines) < 4 and not out.lines:
                return                           # the zygote closed the job without starting it
    finally:
        for fd in (status_r, req_w, resp_r, err_r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _kill(how, pid: int) -> None:
    try:
        how(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def zygote_for(program: str, argv_tail: list[str], env: dict) -> Zygote:
    """The warm fork server for ``program``: started on first use (not waited for: see
    Zygote.ensure_ready), restarted if it died, and shared with processes forked from this one
    once it is ready (jobs are single messages and each brings its own status pipe).
    """
    key = hashlib.sha256(program.encode()).hexdigest()
    with _lock:
        z = _zygotes.get(key)
        if z is None or not z.alive():
            if z is not None:
                z.close()
            z = _zygotes[key] = Zygote(program, argv_tail, env)
            atexit.register(z.close)          # a no-op in processes forked from the owner
        return z


def enabled() -> bool:
    return settings.current().zygote
