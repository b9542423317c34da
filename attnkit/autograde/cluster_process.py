"""Starting and talking to the confined Dask client (cluster_relay.py) from the instructor's process.

The relay runs as ``python -I -S`` with a scrubbed environment (so no ATTNKIT_GRADING_KEY), in the kit's
private world with the host's network (confine.build_world, ``host_network``), and its only channels to this
process are two pipes: requests in, one JSON line per event out. Every line is checked (cluster_reply.line)
before it is acted on; a relay that says anything else, says too much, or dies is taken as lost, and the
students it had are reported not graded. Without user namespaces the relay could read the course, so the
cluster path refuses to start (fail closed) rather than hold a Dask client where the key is.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

from attnkit import KIT_SOURCE
from attnkit.autograde import cluster, cluster_reply

_PROGRAM = "import json, sys\nsys.path.extend(json.loads(sys.argv[2]))\n"
RELAY_TMP_MB = 64


def dask_config() -> dict:
    """This process's Dask configuration (its files, DASK_* variables), as JSON data for the relay, which sees
    neither (a value JSON cannot hold travels as its text)."""
    import dask
    return json.loads(json.dumps(dask.config.config, default=str))


class Relay:
    def __init__(self, proc, stderr=None):
        self.proc, self.stderr = proc, stderr       # stderr: a file of the host's, for the instructor's sentence
        self.buf = bytearray()
        self.lines: list[dict] = []
        self.broken: str | None = None

    @classmethod
    def start(cls, first: dict) -> "Relay":
        from attnkit.isolation import sandbox
        if not sandbox.namespaces_available():
            raise cluster.SchedulerRefused(
                "the Dask client must run in a private world without the course (it may unpickle what the cluster "
                "sends), and this machine allows no user namespaces: use --scheduler local here")
        world = sandbox.world(RELAY_TMP_MB, keep=(str(KIT_SOURCE / "attnkit"),))
        world["host_network"] = True
        program = _PROGRAM + sandbox.kit_imports("from attnkit.autograde import cluster_relay") + "cluster_relay.main()\n"
        env = dict(sandbox._child_env(), PATH=f"{os.path.dirname(sys.executable)}:/usr/bin:/bin")
        stderr = tempfile.TemporaryFile()           # why it ended, if it does: said to the instructor, inert
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", program, json.dumps({"world": world}),
                                 json.dumps(sandbox._site_dirs())], cwd="/", env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
        relay = cls(proc, stderr)
        relay.send(first)
        return relay

    def send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError):
            self.broken = self.broken or "the Dask client process ended"

    def next(self, seconds: float) -> dict | None:
        """The relay's next line, checked, within ``seconds``; None when it said nothing (or is gone: gone())."""
        deadline = time.monotonic() + seconds
        while not self.lines and not self.broken:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not select.select([self.proc.stdout], [], [], left)[0]:
                continue
            data = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not data:
                self.broken = "the Dask client process ended" + self._last_words()
                break
            self.buf += data
            *whole, rest = self.buf.split(b"\n")
            self.buf = bytearray(rest)
            if len(self.buf) > cluster_reply.LINE_LIMIT:
                self._lose("the Dask client sent a line longer than the limit")
            for raw in whole:
                try:
                    self.lines.append(cluster_reply.line(raw.decode("utf-8", errors="strict")))
                except (cluster_reply.Refused, UnicodeDecodeError) as e:
                    self._lose(str(e) if isinstance(e, cluster_reply.Refused) else "the Dask client sent bytes, not text")
                    break
        return self.lines.pop(0) if self.lines else None

    def _last_words(self) -> str:
        """The end of what the relay wrote on stderr (its traceback, say), for the instructor: 300 characters."""
        try:
            self.proc.wait(5)
            self.stderr.seek(max(0, self.stderr.seek(0, os.SEEK_END) - 300))
            tail = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError, AttributeError, subprocess.TimeoutExpired):
            return ""
        status = self.proc.returncode
        return f" (status {status}{': ' + tail[-1][:200] if tail else ''})"

    def _lose(self, why: str) -> None:
        self.broken, self.lines = why, []
        self._kill()

    def gone(self) -> bool:
        return self.broken is not None and not self.lines

    def why_silent(self) -> str:
        return self.broken or "the Dask client process did not answer"

    def finish(self, seconds: float = 15.0) -> None:
        """Close its requests (it cancels what is out and closes its client), then end it if it lingers."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            pass
        self._kill()
        self.proc.stdout.close()
        if self.stderr is not None:
            self.stderr.close()

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # the outer process; PID 1 inside dies with it
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
