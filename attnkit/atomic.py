"""Replace a file all at once: a reader (or a crash) sees the old file or the whole new one, never half.

Standard library only: the Gradescope bundle carries this module (attnkit/gradescope.py imports it).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory (``.<name>.*.tmp``), fsynced
    and then renamed over ``path`` with ``os.replace``; the directory is fsynced too, so the rename survives
    a power cut. Text is written as UTF-8, byte for byte (no newline translation).

    The temporary file must be in the same directory: ``os.replace`` is atomic only within one file system.
    A failed write removes it; one cut short by SIGKILL leaves it behind under a name callers can sweep.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)              # mkstemp makes it 0600; readers (Gradescope, TAs) need the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:                      # some file systems refuse fsync on a directory: the file is written
        pass
