"""Fresh inputs per submission: the judge's plan is seeded from a key the child never sees.

With fixed, public seeds a submission could carry the right answers for the judge's inputs
(computed ahead of time, say with the kit's own reference) and forge a full stream without any
working code. The seed here is HMAC-SHA256(key, assignment, source): the same submission gets the
same inputs on every run (so the same score), a changed one gets new inputs, and nobody without
the key can know them before grading. The key is ``ATTNKIT_GRADING_KEY`` (hex) or the file
``.attnkit/grading-key`` of the kit, made once on first use (readable by the grader only; never
committed; the Gradescope bundle carries it so both paths use the same inputs).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = Path(__file__).resolve().parents[1] / ".attnkit" / "grading-key"


def key_hex() -> str:
    """The grading key, made on first use (what the Gradescope bundle carries)."""
    return _key().hex()


def _key() -> bytes:
    env = os.environ.get("ATTNKIT_GRADING_KEY")
    if env:
        return bytes.fromhex(env)
    try:
        return bytes.fromhex(KEY_FILE.read_text().strip())
    except FileNotFoundError:
        pass
    KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
    tmp = KEY_FILE.with_name(f".grading-key.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    try:
        os.link(tmp, KEY_FILE)           # atomic: of two graders starting at once, one key wins
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return bytes.fromhex(KEY_FILE.read_text().strip())


def seed_for(assignment: str, source: str) -> int:
    """The plan seed for this submission's extracted source (a 63-bit integer)."""
    digest = hmac.new(_key(), f"{assignment}\0{source}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little") >> 1
