"""What one check shows the student: the judge's result cut to the assignment's tier, and its HTML report.

Everything here comes from ``judge.grade``'s result, whose every string the judge already bounded
(attnkit/engine/channel.py), and the HTML is the feedback pages' own report (autoescaped templates): the service
adds no text of the submission's.
"""
from __future__ import annotations

import threading

from attnkit.engine.config import TIERS, AssignmentConfig

NOT_YET = "the details of this check are shown after the deadline"
_drawing = threading.Lock()       # matplotlib's pyplot is not thread-safe: one picture at a time


def shaped(result: dict, cfg: AssignmentConfig, tier: str) -> dict:
    """The answer's JSON for ``tier`` (config.TIERS): ``score`` and ``max_score`` always; the checks the tier
    shows; their sentences and diagnoses as it allows."""
    rank = TIERS.index(tier)
    visible = {c.id for c in cfg.checks if c.visible}
    checks = []
    for c in result["checks"]:
        if rank == 0 and c["id"] not in visible:
            continue                                   # "visible": the hidden checks are not named at all
        item = {"id": c["id"], "title": c.get("title"), "passed": c["passed"], "points": c["points"],
                "max_points": c["max_points"],
                "message": c["message"] if rank >= 2 or c["id"] in visible else None}
        if rank >= 3:
            item["diagnosis"] = c.get("diagnosis")
        checks.append(item)
    return {"assignment": result["assignment"], "score": result["score"], "max_score": result["max_score"],
            "error": result.get("error"), "tier": tier, "checks": checks,
            "attention": result.get("attention") if rank >= 3 else None}


def html(answer: dict) -> str:
    """The feedback pages' report (attnkit/nbgrader_ext/feedback_report.py) for the shaped answer: the pictures
    only at the "diagnosis" tier, a fixed sentence where a tier holds a check's message back."""
    from attnkit.nbgrader_ext.feedback_report import page
    result = dict(answer, checks=[dict(c, message=c["message"] if c["message"] is not None else NOT_YET,
                                       diagnosis=c.get("diagnosis")) for c in answer["checks"]])
    if result.get("attention"):
        with _drawing:
            return page(result)
    return page(result)
