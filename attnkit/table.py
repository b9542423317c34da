"""Human-readable rendering of a judge result, and of a class.

Every cell that may hold student text (a check's message, the error, a student id) goes through ``visible``: a
control or format character shows as its escape, and a newline as ``\\n``, so a row stays one row.
"""
from __future__ import annotations

from typing import NamedTuple

from attnkit.engine.terminal import visible


def result_table(result: dict) -> str:
    rows = [f"{result['assignment']}: {result['score']:g} / {result['max_score']:g}"]
    if result.get("error"):
        rows.append(f"  error: {visible(result['error'])}")
    width = max(len(visible(c["id"])) for c in result["checks"])
    for c in result["checks"]:
        mark = "PASS" if c["passed"] else "FAIL"
        rows.append(f"  {mark}  {visible(c['id']):<{width}}  {c['points']:g}/{c['max_points']:g}"
                    + ("" if c["passed"] else f"  {visible(c['message'])}"))
        if c.get("diagnosis"):
            rows.append(f"        {'':<{width}}  diagnosis: {visible(c['diagnosis'])}")
    return "\n".join(rows)


def failed_note(lost: list[str], written: list[tuple[float | None, float]]) -> str:
    """A graded student's last column: the grade cells that lost points, then the written answer: still awaiting
    a TA, or the TA's grade. ``written``: (the TA's score, None before they graded; the maximum) per written
    answer. A forced regrade keeps the TA's score (nbgrader marks it for review, but it stands)."""
    note = ", ".join(lost)
    if any(score is None for score, _ in written):
        return note + "  [written answer awaits a TA]"
    if written:
        return note + f"  [written answer: {sum(s for s, _ in written):g} / {sum(m for _, m in written):g} from a TA]"
    return note


class Row(NamedTuple):
    """One student's line of a class table; ``score`` None when there is none to show (not graded)."""
    student: str
    score: float | None
    max_score: float | None
    note: str
    status: str | None = None


def class_table(rows: list[Row]) -> str:
    """The class as text, one student a line (attnkit demo, attnkit autograde's summary); a status column
    when any row has one."""
    rows = [r._replace(student=visible(r.student), note=visible(r.note)) for r in rows]
    width = max([len("student")] + [len(r.student) for r in rows])
    statuses = any(r.status is not None for r in rows)
    out = [f"{'student':<{width}}  {'score':>11}  " + (f"{'status':<15}  " if statuses else "") + "failed checks"]
    for r in rows:
        score = f"{r.score:>5g} / {r.max_score:<3g}" if r.score is not None else f"{'-':>11}"
        out.append(f"{r.student:<{width}}  {score}  " + (f"{r.status or '':<15}  " if statuses else "") + r.note)
    return "\n".join(out)
