"""Secret inputs per course: the judge's plan is seeded from a key the child never sees.

With fixed, public seeds a submission could carry the right answers for the judge's inputs
(computed ahead of time, say with the kit's own reference) and forge a full stream without any
working code. The seed here is HMAC-SHA256(key, assignment, student): every submission of a student gets
the same inputs, each classmate others, and nobody without the key can know them before grading.

Why not the submission's code as well (as until issue 22): then editing a comment drew new inputs, and
a bug that shows on some inputs only (weights pruned below a threshold) scored 20, 16 or 15 by the
draw; resubmitting until the draw missed it worked. Now the seed cannot be re-rolled by the student, and
each property is tested on inputs built to stress it (plan.py), so the verdict does not rest on the draw at
all (bench/key_dependence.py; tests/course/test_no_reroll.py): two students with the same bug lose the same checks
on their different inputs. Why per student (issue 29): with one draw for the class, a student who carried the
hidden inputs out through the feedback (a covert channel, bounded now: attnkit/engine/channel.py) held them
for every classmate. The feedback never shows a graded input or its expected output (the attention picture is
drawn on an input made for the picture alone), the key stays on the grading machine, and a course makes a
new key per term (delete ``.attnkit/grading-key``).

The key is ``ATTNKIT_GRADING_KEY`` (hex) or the file ``.attnkit/grading-key`` of the course, made once
on first use (readable by the grader only; never committed; the Gradescope bundle carries it so both
paths use the same inputs).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from attnkit.engine import registry


def key_file() -> Path:
    """Where the course keeps its key: ``.attnkit/grading-key`` in the course directory (gitignored, 0600)."""
    return registry.course() / ".attnkit" / "grading-key"


def key_hex() -> str:
    """The grading key, made on first use (what the Gradescope bundle carries)."""
    return _key().hex()


def _key() -> bytes:
    env = os.environ.get("ATTNKIT_GRADING_KEY")
    if env:
        return bytes.fromhex(env)
    key_path = key_file()
    try:
        return bytes.fromhex(key_path.read_text().strip())
    except FileNotFoundError:
        pass
    key_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    ignore = key_path.parent / ".gitignore"          # the course's kit state is never committed, in any course
    if not ignore.exists():
        ignore.write_text("# attnkit's state of this course (the grading key): never committed\n*\n")
    tmp = key_path.with_name(f".grading-key.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    try:
        os.link(tmp, key_path)           # atomic: of two graders starting at once, one key wins
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return bytes.fromhex(key_path.read_text().strip())


def seed_for(assignment: str, student: str = "") -> int:
    """The plan seed of ``assignment`` for ``student`` under this course's key: all 256 bits of
    HMAC-SHA256(key, assignment NUL student), used whole by the plan's generators (attnkit/toolkit/draw.py).

    The same for every submission of one student, whatever its code, comments or formatting (no re-roll);
    another for each classmate, so what one student learns of their inputs is worth nothing to another.
    ``student=""`` (``attnkit grade`` without ``--student``) is the course's own draw."""
    digest = hmac.new(_key(), f"{assignment}\0{student}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest, "little")
