"""What the instructor's process accepts from the confined Dask client (cluster_relay.py): checked, or refused.

The relay is where Dask may unpickle what a worker, the scheduler or the wire sent, so whatever it says is
untrusted: each line must be one JSON object of a known kind, within size caps, naming a student this run
has out; a worker's reply must be the judge's JSON text in the shape cluster.judge_submission writes, for
the notebooks this process sent. Anything else is refused in one sentence (``Refused``), and that student
is reported not graded. JSON is parsed by the standard library (no code runs), its depth bounded first.
"""
from __future__ import annotations

import json
import math
import re

LINE_LIMIT = 4 * 1024 * 1024         # one line from the relay (a judge result is tens of KB)
DEPTH_LIMIT = 32                     # nesting of a worker's reply (the judge's result is about 6 deep)
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Refused(ValueError):
    """A line or a reply that is not what it must be, said in one sentence."""


def _depth_ok(text: str, limit: int) -> bool:
    """Brackets nested at most ``limit`` deep, strings skipped (json.loads recurses: bounded before it runs)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _loads(text, what: str, limit: int):
    if not isinstance(text, str) or len(text) > limit:
        raise Refused(f"{what} was not text within {limit // 2**20} MiB")
    if not _depth_ok(text, DEPTH_LIMIT):
        raise Refused(f"{what} was nested deeper than {DEPTH_LIMIT}")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise Refused(f"{what} was not JSON") from None


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def line(text: str) -> dict:
    """One line from the relay: an object of exactly one of the protocol's kinds."""
    msg = _loads(text, "a line from the Dask client", LINE_LIMIT)
    kinds = {frozenset({"started"}): list, frozenset({"refused"}): str, frozenset({"want"}): int,
             frozenset({"lost"}): str, frozenset({"student", "reply"}): str, frozenset({"student", "error"}): str}
    if not isinstance(msg, dict) or frozenset(msg) not in kinds:
        raise Refused("the Dask client said something outside its protocol")
    for k, v in msg.items():
        want = str if k == "student" else kinds[frozenset(msg)]
        if type(v) is not want:
            raise Refused("the Dask client said something outside its protocol")
    if "started" in msg and not all(isinstance(w, str) and len(w) < 300 for w in msg["started"]):
        raise Refused("the Dask client said something outside its protocol")
    for k in ("refused", "lost", "error"):
        if k in msg:
            msg[k] = msg[k][:600]
    return msg


def reply(text: str, assignment: str, sent: set[str]) -> dict:
    """A worker's reply (cluster.judge_submission's JSON text) for notebooks ``sent``, checked field by field."""
    r = _loads(text, "the worker's reply", LINE_LIMIT)
    if not isinstance(r, dict) or not set(r) <= {"ok", "error", "notebooks", "worker", "pid", "seconds"}:
        raise Refused("the worker's reply is not the judge's result")
    if type(r.get("ok")) is not bool or not _opt_str(r.get("error"), 600) or not _opt_str(r.get("worker"), 300):
        raise Refused("the worker's reply is not the judge's result")
    if r.get("pid") is not None and type(r["pid"]) is not int:
        raise Refused("the worker's reply is not the judge's result")
    if not _number(r.get("seconds", 0.0)) or r.get("seconds", 0.0) < 0:
        raise Refused("the worker's reply is not the judge's result")
    notebooks = r.get("notebooks")
    if not isinstance(notebooks, dict) or not set(notebooks) <= sent or (r["ok"] and set(notebooks) != sent):
        raise Refused("the worker's reply names other notebooks than the ones sent")
    for v in notebooks.values():
        if v is None:
            continue
        if not isinstance(v, dict) or set(v) != {"view", "result"} or not isinstance(v["view"], str) \
                or not _HEX64.fullmatch(v["view"]):
            raise Refused("the worker's reply is not the judge's result")
        _result(v["result"], assignment)
    return r


def _result(result, assignment: str) -> None:
    """A judge result (engine.judge.grade) as this course's manifest makes it: every check of the manifest once,
    with its own title and points, a total that is their sum, the manifest's maximum. What a lying worker can
    still do is say the verdicts it likes (docs/scaling.md, "Trust"), never another shape or another scale."""
    from attnkit.engine import config
    cfg = config.load(assignment)
    if not isinstance(result, dict) or result.get("assignment") != assignment:
        raise Refused("the worker's reply holds a result of another assignment")
    checks = result.get("checks")
    if not isinstance(checks, list) or [c.get("id") if isinstance(c, dict) else None for c in checks] \
            != [c.id for c in cfg.checks]:
        raise Refused("the worker's reply holds other checks than the assignment's")
    for c, want in zip(checks, cfg.checks):
        if type(c.get("passed")) is not bool or not isinstance(c.get("message"), str) \
                or len(c["message"]) > 10_000 or not _opt_str(c.get("diagnosis"), 10_000) \
                or c.get("points") != (want.points if c["passed"] else 0.0) or c.get("max_points") != want.points:
            raise Refused("the worker's reply holds a check that is not the judge's")
    if result.get("max_score") != cfg.max_score or not _number(result.get("score")) \
            or not math.isclose(result["score"], sum(c["points"] for c in checks)) \
            or not _opt_str(result.get("error"), 10_000):
        raise Refused("the worker's reply holds a score out of range")


def _opt_str(v, limit: int) -> bool:
    return v is None or (isinstance(v, str) and len(v) <= limit)


def _number(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)
