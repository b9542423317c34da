"""What the instructor's process takes from the confined Dask client: the judge's result in the manifest's shape.

The second red team's forged replies passed the field checks: a score and maximum of 1e308, a failed check with
no message, no checks at all, a check id `../../x`; and one 59 MB line cost 40 s and 560 MiB. Each is refused
now in one sentence (attnkit/autograde/cluster_reply.py), and an honest result is taken as it is.
"""
import json
import time

import pytest

from attnkit.autograde import cluster_reply
from attnkit.engine import config
from tests.fixture_course import NAME as A

pytestmark = pytest.mark.usefixtures("fixture_course")       # any assignment's manifest: the fixture course's
VIEW = "ab" * 32


def honest(passed=True):
    cfg = config.load(A)
    checks = [{"id": c.id, "title": c.title, "passed": passed, "points": c.points if passed else 0.0,
               "max_points": c.points, "message": "passed" if passed else "forward raised ValueError",
               "diagnosis": None} for c in cfg.checks]
    return {"assignment": A, "score": sum(c["points"] for c in checks), "max_score": cfg.max_score,
            "error": None, "checks": checks}


def reply_text(result):
    return json.dumps({"ok": True, "error": None, "worker": "tcp://w", "pid": 1, "seconds": 0.1,
                       "notebooks": {A: {"view": VIEW, "result": result}}})


def forged(change):
    r = honest()
    change(r)
    return r


def test_an_honest_result_is_taken():
    for passed in (True, False):
        got = cluster_reply.reply(reply_text(honest(passed)), A, {A})
        assert got["notebooks"][A]["result"]["score"] == honest(passed)["score"]


@pytest.mark.parametrize("name,change", [
    ("score and maximum of 1e308", lambda r: r.update(score=1e308, max_score=1e308)),
    ("a score above the points", lambda r: r.update(score=r["score"] + 1)),
    ("a failed check with no message", lambda r: r["checks"][0].update(passed=False, points=0.0, message=None)),
    ("no checks at all", lambda r: r.update(checks=[], score=0.0)),
    ("a check id with path characters", lambda r: r["checks"][0].update(id="../../x")),
    ("a check twice", lambda r: r["checks"].append(dict(r["checks"][0]))),
    ("points beyond the check's", lambda r: r["checks"][0].update(points=1e6)),
    ("a passed check worth nothing", lambda r: r["checks"][0].update(points=0.0)),
])
def test_a_forged_result_is_refused(name, change):
    with pytest.raises(cluster_reply.Refused):
        cluster_reply.reply(reply_text(forged(change)), A, {A})


def test_a_huge_line_is_refused_at_once():
    checks = [{"id": "x", "passed": True}] * 600_000                    # ~20 MB, under the old 64 MiB line cap
    text = json.dumps({"student": "ada", "reply": json.dumps({"checks": checks})})
    t0 = time.monotonic()
    with pytest.raises(cluster_reply.Refused):
        cluster_reply.line(text)
    assert time.monotonic() - t0 < 2.0
