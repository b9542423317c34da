"""Students' tokens for the check service: made here, shown once, kept only as a SHA-256 hash.

A token is 32 random bytes (256 bits): no rate limit is needed against guessing one, and a hash of it (no salt
needed at that width) is all a copy of the database gives away.
"""
from __future__ import annotations

import hashlib
import re
import secrets
import time

from attnkit.serve.store import Store

STUDENT = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")     # nbgrader's student ids, and e-mail-like ones


class TokenProblem(ValueError):
    """One sentence for the instructor."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def check_student(student: str) -> str:
    if not STUDENT.fullmatch(student or ""):
        raise TokenProblem(f"a student id is 1-128 letters, digits or _.@+-, not {student!r}")
    return student


def add(store: Store, student: str) -> str:
    """A new token for ``student`` (replacing any earlier one, which stops working); returns the token."""
    token = secrets.token_urlsafe(32)
    with store.transaction() as db:
        db.execute("INSERT INTO tokens (student, sha256, created, revoked) VALUES (?, ?, ?, NULL) "
                   "ON CONFLICT(student) DO UPDATE SET sha256 = excluded.sha256, created = excluded.created, "
                   "revoked = NULL", (check_student(student), digest(token), time.time()))
    return token


def revoke(store: Store, student: str) -> None:
    with store.transaction() as db:
        if db.execute("UPDATE tokens SET revoked = ? WHERE student = ? AND revoked IS NULL",
                      (time.time(), student)).rowcount == 0:
            raise TokenProblem(f"{student!r} has no token in use")


def listing(store: Store) -> list[tuple[str, float, float | None]]:
    """(student, created, revoked or None) for every student who was given a token."""
    return store.query("SELECT student, created, revoked FROM tokens ORDER BY student")


def student_of(store: Store, token: str | None) -> str | None:
    """Whose token this is, or None (none, unknown, revoked). Looked up by its hash: nothing compares secrets."""
    if not token or len(token) > 256:
        return None
    rows = store.query("SELECT student FROM tokens WHERE sha256 = ? AND revoked IS NULL", (digest(token),))
    return rows[0][0] if rows else None
