"""One run per course and assignment.

The lock is filelock's flock on a descriptor this module opens and keeps (``filelock.lock_descriptor``),
not a ``filelock.FileLock``: FileLock closes its descriptor in every forked child, whereas this one must
be inherited by the workers, so that after the parent is killed (SIGKILL) a new run still waits until
the killed run's last workers are gone. Closing the parent's descriptor (rather than unlocking it)
leaves the lock with any worker still alive for the same reason.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import filelock

LOCK_PATIENCE = 30              # seconds a run waits for another run (or a killed run's last workers) to end
POLL_SECONDS = 0.2


@contextmanager
def one_run_at_a_time(path: Path, patience: float = LOCK_PATIENCE,
                      waiting: Callable[[], None] = lambda: None) -> Iterator[bool]:
    """Hold the lock at ``path`` for the block; yields False (not held) if another holder kept it for
    ``patience`` seconds. ``waiting()`` is called once, when the lock is not free at first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)     # not inheritable across exec, inherited by fork
    try:
        deadline = time.monotonic() + patience
        held = filelock.lock_descriptor(fd, blocking=False)
        if not held:
            waiting()
        while not held and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            held = filelock.lock_descriptor(fd, blocking=False)
        yield held
    finally:
        os.close(fd)
