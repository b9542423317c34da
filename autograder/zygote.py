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
        self.sock, self.send_lock = ours, threading.Lock()
        ours.settimeout(120)
        try:
            ready = ours.recv(16)
        except OSError:
            ready = b""
        ours.settimeout(None)
        if ready != b"ready":
            self.close()
            raise ZygoteGone(f"the fork server did not start: {self.stderr_tail()}")

    def stderr_tail(self) -> str:
        try:
            with open(os.path.join(self.home, ".stderr"), "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: dict, timeout: float) -> tuple[int | None, bool]:
        """Fork one submission process for ``job``; wait for it, up to ``timeout`` s; kill its group.

        Returns (exit status, or -signal, or None; timed out). Raises ZygoteGone when the job
        never started.
        """
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
            while len(lines) < 2:
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
            if lines:
                try:
                    os.killpg(lines[0], signal.SIGKILL)     # the submission process and all it started
                except (ProcessLookupError, PermissionError):
                    pass
        if not lines:
            if timed_out:
                return None, True
            raise ZygoteGone(f"the fork server did not take the job: {self.stderr_tail()}")
        if len(lines) < 2:
            return None, timed_out
        status = lines[1]
        return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)), False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        import shutil
        shutil.rmtree(self.home, ignore_errors=True)


def zygote_for(program: str, argv_tail: list[str], env: dict) -> Zygote:
    """This process's warm fork server for ``program`` (started on first use, restarted if it died).

    Keyed by process too: a worker forked from a grading process starts its own.
    """
    key = f"{os.getpid()}:{hash(program)}"
    with _lock:
        z = _zygotes.get(key)
        if z is None or not z.alive():
            if z is not None:
                z.close()
            z = _zygotes[key] = Zygote(program, argv_tail, env)
        return z


def enabled() -> bool:
    return os.environ.get("ATTNKIT_ZYGOTE", "1") != "0"
