"""Each student's checks per assignment: a token bucket kept in the course's database.

The bucket is the defence against using the service as an oracle (many near-identical submissions to read the
hidden checks' verdicts one bit at a time): ``burst`` checks at once, then one per ``1/rate``. It lives on disk,
so a restart of the service gives no one a full bucket. A grant (``attnkit tokens grant``) adds checks above the
burst; refilling never takes them away.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from attnkit.engine.config import CheckService
from attnkit.serve.store import Store


@dataclass(frozen=True)
class Taken:
    allowed: bool
    left: int                    # whole checks left after this one
    retry_after: int | None      # seconds until the next check is possible, when none is left


def refill(tokens: float, updated: float, now: float, per_second: float, burst: int) -> float:
    """The bucket's level at ``now``: refilled up to ``burst``, never lowered (a grant may have raised it above)."""
    return max(tokens, min(float(burst), tokens + max(0.0, now - updated) * per_second))


def _wait(level: float, per_second: float) -> int:
    return max(1, math.ceil((1.0 - level) / per_second))


def take(store: Store, student: str, assignment: str, rules: CheckService, now: float | None = None) -> Taken:
    """Spend one check of ``student`` on ``assignment`` if the bucket has one."""
    now, rate = time.time() if now is None else now, rules.per_second
    with store.transaction() as db:
        row = db.execute("SELECT tokens, updated FROM buckets WHERE student = ? AND assignment = ?",
                         (student, assignment)).fetchone()
        level = refill(*row, now, rate, rules.burst) if row else float(rules.burst)
        allowed = level >= 1.0
        if allowed:
            level -= 1.0
        db.execute("INSERT OR REPLACE INTO buckets (student, assignment, tokens, updated) VALUES (?, ?, ?, ?)",
                   (student, assignment, level, now))
    left = int(level + 1e-9)
    return Taken(allowed, left, None if left >= 1 else _wait(level, rate))


def give_back(store: Store, student: str, assignment: str) -> None:
    """Return a check the service took but could not judge (a fault of the kit, never of the submission)."""
    with store.transaction() as db:
        db.execute("UPDATE buckets SET tokens = tokens + 1 WHERE student = ? AND assignment = ?",
                   (student, assignment))


def grant(store: Store, student: str, assignment: str, n: int, rules: CheckService,
          now: float | None = None) -> float:
    """Give ``student`` ``n`` more checks of ``assignment`` now (above the burst if so); returns the new level."""
    now = time.time() if now is None else now
    with store.transaction() as db:
        row = db.execute("SELECT tokens, updated FROM buckets WHERE student = ? AND assignment = ?",
                         (student, assignment)).fetchone()
        level = (refill(*row, now, rules.per_second, rules.burst) if row else float(rules.burst)) + n
        db.execute("INSERT OR REPLACE INTO buckets (student, assignment, tokens, updated) VALUES (?, ?, ?, ?)",
                   (student, assignment, level, now))
    return level


def record(store: Store, student: str, assignment: str, score, max_score, sha256: str, tier: str,
           now: float | None = None) -> None:
    """One line per check judged: who, when, what, the score, which notebook (its SHA-256) and what it was shown."""
    with store.transaction() as db:
        db.execute("INSERT INTO checks (student, time, assignment, score, max_score, notebook_sha256, tier) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (student, time.time() if now is None else now, assignment, score, max_score, sha256, tier))


def attempts(store: Store, assignment: str) -> list[tuple]:
    """Per student: (student, checks, distinct notebooks, best score, last score, max score, first, last time)."""
    return store.query(
        "SELECT student, COUNT(*), COUNT(DISTINCT notebook_sha256), MAX(score), "
        "(SELECT c2.score FROM checks c2 WHERE c2.student = c.student AND c2.assignment = c.assignment "
        " ORDER BY c2.time DESC, c2.id DESC LIMIT 1), MAX(max_score), MIN(time), MAX(time) "
        "FROM checks c WHERE assignment = ? GROUP BY student ORDER BY student", (assignment,))
