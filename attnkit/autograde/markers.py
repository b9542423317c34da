"""Completion markers: what makes a rerun skip a student.

After a student's grades are committed to the gradebook, a worker writes
``.attnkit/autograde/<assignment>/<student>.json`` (atomically) with the score, the judge's per-check
result and a fingerprint of the submitted files. A marker counts only while the submission, the
gradebook and ``autograded/`` still say what it says (``why_regrade``). It lives outside ``autograded/``
because ``generate_feedback`` copies every file of ``autograded/<student>/<assignment>/`` into the
student's feedback.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from attnkit.atomic import write_atomic

STATE_DIR = Path(".attnkit") / "autograde"


def fingerprint(folder: Path) -> str:
    """What was handed in: every file's relative path and bytes.

    The folder is the student's: links are hashed as their target's name (never followed), FIFOs,
    sockets and devices as their kind (never opened), and a file is read at most to attnkit.isolation.files'
    notebook cap (a larger file is refused for grading anyway), so no entry can make this hang or read
    without end.
    """
    from attnkit.isolation import files
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):          # os.walk does not descend into links
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            try:
                mode = os.lstat(p).st_mode
                if stat.S_ISLNK(mode):
                    h.update(b"<link>" + os.fsencode(os.readlink(p)))
                elif not stat.S_ISREG(mode):
                    h.update(f"<{files.kind(mode)}>".encode())
                else:
                    fd, _ = files.open_regular(p, max_bytes=1 << 62)
                    try:
                        left = files.MAX_NOTEBOOK_BYTES + 1
                        while left > 0:
                            block = os.read(fd, min(1 << 20, left))
                            if not block:
                                break
                            h.update(block)
                            left -= len(block)
                    finally:
                        os.close(fd)
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
    return h.hexdigest()


def read(path: Path, student: str) -> dict | None:
    """The marker at ``path`` if it is a readable marker of ``student``, else None."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("student") == student else None


def write(path: Path, marker: dict) -> None:
    write_atomic(path, json.dumps(marker, indent=1, sort_keys=True))


def remove(path: Path) -> None:
    """From now until the new marker is written, the student counts as not graded."""
    Path(path).unlink(missing_ok=True)


def sweep_temporary(state: Path) -> None:
    """Temporary files of a run killed in the middle of a write (write_atomic names them .<name>.*.tmp)."""
    for stale in state.glob(".*.tmp") if state.is_dir() else []:
        stale.unlink(missing_ok=True)


def why_regrade(marker: dict | None, submitted: Path, autograded: Path, grades: dict | None,
                check_cells: dict[str, str]) -> str | None:
    """None if the student is fully graded as ``marker`` says; otherwise why not, in a few words.

    ``submitted`` and ``autograded`` are the student's folders of this assignment, ``grades`` what the
    gradebook holds for the student ({(notebook, grade cell): grade fields}, None if nothing),
    ``check_cells`` maps the judge's check ids to the grade cells carrying their points.
    """
    if marker is None:
        return "not graded yet"
    if marker.get("fingerprint") != fingerprint(submitted):
        return "resubmitted since it was graded"
    if grades is None:
        return "missing from the gradebook"
    for nb_name in marker.get("notebooks", []):
        if not (autograded / f"{nb_name}.ipynb").is_file():
            return "autograded notebook missing"
    for nb_name, result in (marker.get("results") or {}).items():
        for check in (result or {}).get("checks", []):
            g = grades.get((nb_name, check_cells.get(check["id"])))
            if g is None or g["auto_score"] is None or float(g["auto_score"]) != float(check["points"]):
                return "gradebook disagrees with the marker"
    return None
