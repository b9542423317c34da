"""Forked worker processes, one item at a time each, with a watchdog.

Why not multiprocessing.Pool or concurrent.futures: the workers must be forked from the parent as it is
(nbgrader, torch and the judge's fork server already loaded), a worker that dies or hangs must be
replaced without losing the others' work, a hung one must be ended after its own deadline, and ending
a worker must let its ``finally`` blocks run (they kill the judge's children and remove scratch files).

Each worker: gets SIGTERM from the kernel when the parent dies (PR_SET_PDEATHSIG), ignores SIGINT (Ctrl-C
is the parent's to handle; it ends the workers with SIGTERM, raised as SystemExit so ``finally`` blocks
run), and keeps its temporary files under one scratch directory, removed when it ends (or by the parent,
when it was killed outright).
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from attnkit.isolation import linux

Job = Callable[[str], dict]


@dataclass
class Worker:
    proc: object
    conn: object
    item: str | None = None           # what it is working on, None when idle
    started: float = 0.0
    outcomes: list = field(default_factory=list)      # what it returned (or the failure recorded for it)


def scratch_prefix(pid: int) -> str:
    return f"attnkit-autograde-worker{pid}-"


def remove_scratch(pid: int) -> None:
    """A worker killed outright (SIGKILL) or ended by os._exit cannot clean up after itself: its parent does."""
    for d in glob.glob(os.path.join(tempfile.gettempdir(), scratch_prefix(pid) + "*")):
        shutil.rmtree(d, ignore_errors=True)


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _serve(conn, start: Callable[[], Job], parent_pid: int, inherited: list) -> None:
    """A worker's life: ``start()`` once, then the job on each item received until told to stop."""
    for c in inherited:                       # other workers' pipe ends, inherited through fork
        try:
            c.close()
        except OSError:
            pass
    linux.die_with_parent(signal.SIGTERM)     # not Linux: the worker notices the closed pipe instead
    if os.getppid() != parent_pid:            # the parent died before the line above
        os._exit(3)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_exit)
    # Every temporary directory of the job (the judge's, the kernel's) goes under this worker's own.
    scratch = tempfile.mkdtemp(prefix=scratch_prefix(os.getpid()))
    tempfile.tempdir = scratch
    try:
        job = start()
        while True:
            try:
                item = conn.recv()
            except (EOFError, OSError):
                break
            if item is None:
                break
            conn.send(job(item))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Pool:
    """``jobs`` workers forked from this process; each runs ``start()`` once, then the job it returns per item.

    An item whose worker died, or ran longer than ``watchdog_seconds`` (then the worker is ended), is
    reported as failed and its worker replaced.
    """

    def __init__(self, start: Callable[[], Job], jobs: int, watchdog_seconds: float):
        self.start, self.jobs, self.watchdog_seconds = start, jobs, watchdog_seconds
        self.workers: list[Worker] = []
        self.retired: list[Worker] = []

    @property
    def all_workers(self) -> list[Worker]:
        return self.retired + self.workers

    def started(self, pids: list[int]) -> str:
        return f"{len(pids)} worker(s), pids {', '.join(map(str, pids))}"

    def worker_outcomes(self) -> list:
        """(pid, the outcomes it returned) per worker process, for last_run.json."""
        return [(w.proc.pid, w.outcomes) for w in self.all_workers]

    def spawn(self) -> Worker:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=True)
        inherited = [w.conn for w in self.workers] + [parent_end]
        proc = ctx.Process(target=_serve, args=(child_end, self.start, os.getpid(), inherited),
                           name="attnkit-autograde-worker", daemon=False)
        proc.start()
        child_end.close()
        w = Worker(proc=proc, conn=parent_end)
        self.workers.append(w)
        return w

    def stop(self, w: Worker, timeout: float = 10.0) -> None:
        """SIGTERM (its ``finally`` blocks run), SIGKILL if it has not ended within ``timeout`` seconds."""
        if w.proc.is_alive():
            try:
                os.kill(w.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            w.proc.join(timeout)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5)
        if w.proc.exitcode is not None:      # ended without its `finally` (a signal, os._exit): its scratch stays
            remove_scratch(w.proc.pid)
        try:
            w.conn.close()
        except OSError:
            pass

    def stop_all(self) -> None:
        for w in self.workers:
            self.stop(w)

    def run(self, items: list[str], on_result: Callable[[str, dict], None], on_start=None, on_wait=None) -> None:
        """Each item through the job, ``on_result(item, outcome)`` as each ends. A failure the pool saw
        itself is ``{"ok": False, "error": why, "seconds": ...}``. ``on_start(pids)`` once the first
        workers are forked; ``on_wait()`` about once a second while they work."""
        from multiprocessing.connection import wait
        pending = deque(items)
        for _ in range(min(self.jobs, len(pending))):
            self.spawn()
        if on_start is not None:
            on_start([w.proc.pid for w in self.workers])

        def retire(w: Worker):
            self.stop(w)
            self.workers.remove(w)
            self.retired.append(w)

        def record(w: Worker, item: str, outcome: dict):
            w.outcomes.append(outcome)
            on_result(item, outcome)

        def dispatch(w: Worker):
            """Hand ``w`` its next item (or tell it to finish); a worker found dead is replaced."""
            while True:
                item = pending.popleft() if pending else None
                try:
                    w.conn.send(item)
                except OSError:
                    if item is None:
                        w.item = None
                        return
                    pending.appendleft(item)
                    retire(w)
                    w = self.spawn()
                    continue
                w.item, w.started = item, time.monotonic()
                return

        for w in list(self.workers):
            dispatch(w)
        while any(w.item is not None for w in self.workers):
            busy = [w for w in self.workers if w.item is not None]
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
            for w in busy:
                if w.conn in ready:
                    try:
                        out = w.conn.recv()
                    except (EOFError, OSError):
                        out = None
                    if out is not None:
                        record(w, w.item, out)
                        dispatch(w)
                        continue
                overdue = time.monotonic() - w.started > self.watchdog_seconds
                if w.proc.sentinel in ready or not w.proc.is_alive() or overdue:
                    item, started = w.item, w.started
                    if overdue and w.proc.is_alive():
                        why = f"grading took longer than {self.watchdog_seconds:.0f} s"
                    else:
                        w.proc.join(5)            # its pipes close a moment before it can be reaped
                        why = f"the worker process died (exit status {w.proc.exitcode})"
                    retire(w)
                    record(w, item, {"ok": False, "error": why, "seconds": time.monotonic() - started})
                    if pending:
                        dispatch(self.spawn())
            if on_wait is not None:
                on_wait()
        for w in self.workers:
            w.proc.join(10)
            if w.proc.is_alive():
                self.stop(w)
