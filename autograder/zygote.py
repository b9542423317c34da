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

    def run(self, job: dict, timeout: float) -> tuple[int | None, bool, int]:
        """Fork one submission process for ``job``; wait for it, up to ``timeout`` s; kill its group.

        Returns (exit status, or -signal, or None; timed out; peak memory of the child in KiB,
        0 if unknown). Raises ZygoteGone when the job never started.
        """
        self.ensure_ready()
        r, w = os.pipe()
        try:
            with self.send_lock:
                self.sock.sendmsg([json.dumps(job).encode()],
                                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]))])
        except OSError as e:
            os.close(r)
            raise ZygoteGone(f"the fork server is gone ({e})") from None
        finally:
            os.close(w)
        lines, buf, timed_out = [], b"", False
        deadline = time.monotonic() + timeout
        try:
            while len(lines) < 4:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not select.select([r], [], [], min(left, 5.0))[0]:
                    if not lines and not self.alive():
                        break
                    continue
                data = os.read(r, 64)
                if not data:
                    break
                buf += data
                *done, buf = buf.split(b"\n")
                lines += [int(x) for x in done]
        finally:
            os.close(r)
            if len(lines) > 1:    # PID 1 of the namespace: all in it die with it, even a process that
                _kill(os.kill, lines[1])    # left the group and cleared its parent-death signal
            if lines:
                _kill(os.killpg, lines[0])  # the submission process and its group
        if not lines:
            if timed_out:
                return None, True, 0
            raise ZygoteGone(f"the fork server did not take the job: {self.stderr_tail()}")
        if len(lines) < 4:
            return None, timed_out, 0
        status = lines[2]
        return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)), False, lines[3]

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
    return os.environ.get("ATTNKIT_ZYGOTE", "1") != "0"
