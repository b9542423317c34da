"""A submission that steers the check service's judge into a free check, on this course's `causal_head`: its 15
experiments give the attack 15 tries, one nesting depth each (970-984), so one check covers the window where the
judge's reader fails and the monitor's does not, wherever the kit's stacks put it within those depths. On the fixture
course's example (two experiments) two tries would need the window measured to a depth or two. The service is the
real one, in process (tests/test_attack_serve4.py holds the kit's other attacks on it, on the fixture course)."""
import json

import pytest

from attnkit.isolation import framing
from attnkit.isolation.framing import decode_frames
from attnkit.serve import app, limits, tokens
from attnkit.serve.store import Store
from tests.notebooks import solution_source, submission
from tests.test_attack_serve4 import _client

A = "causal_head"
FORWARD_LINE = "    def forward(self, x):                                       # x: (B, T, d)\n"


def _forward(code: str) -> bytes:
    """The solution's head with ``code`` run first in forward, as the notebook a student sends."""
    src = solution_source(A, "head")
    assert FORWARD_LINE in src
    src = src.replace(FORWARD_LINE, FORWARD_LINE + "".join(f"        {l}\n" for l in code.splitlines()))
    return json.dumps(submission(A, {"head": src})).encode()


# The submission, in `forward`, finds its loader's pipe (the Recorder of child_runtime._run_experiments, up its own
# stack) and writes there a well-formed result frame whose meta nests NEST lists: deep enough that the judge's
# json.loads (deeper in its own stack, in the service's worker thread) raises RecursionError where the monitor's
# (shallower) did not. The judge's reader then saw no frame at all, not even the monitor's "started": a KitFault,
# and the check was given back. Each experiment tries another depth, so one check covers the window.
DEEP = '''import sys as _s, os as _o, json as _j, struct as _st
_f, _req = _s._getframe(), None
while _f is not None and _f.f_code.co_name != "_run_experiments":
    _f = _f.f_back
_rec, _exp = _f.f_locals["rec"], _f.f_locals["exp"]
while _f is not None and _f.f_code.co_name != "_loader":
    _f = _f.f_back
_n = 970 + [e["name"] for e in _f.f_locals["request"]["experiments"]].index(_exp["name"])
_h = ('{"meta": {"kind": "result", "name": ' + _j.dumps(_exp["name"]) + ', "meta": {"x": ' + "[" * _n
      + "]" * _n + '}}, "arrays": {}, "payload": 0}').encode()
_o.write(_rec.fd, _st.pack("<Q", len(_h)) + _h)
_o._exit(0)'''


def test_a_submission_cannot_steer_the_judge_into_a_free_check(tmp_path, monkeypatch):
    """A check the judge could not read because of what the submission sent counts as a check: only the kit's
    own failure before any submission code ran (KitFault) is given back."""
    monkeypatch.setenv("ASYNC_TEST_TIMEOUT", "240")      # the test client's wait: a real judging, fork server cold
    store = Store(tmp_path / "state")
    token = tokens.add(store, "alice")
    service = app.Service(store, workers=1, queue=2, assignments=[A])
    rules = service.configs[A].check_service
    before = limits.grant(store, "alice", A, 5, rules)
    unreadable = []                 # the judge's reads of a response that failed: the attack reached its window

    def decode(blob, strict=False):
        try:
            return decode_frames(blob, strict)
        except framing.WireError:
            unreadable.append(len(blob))
            raise
    monkeypatch.setattr(framing, "decode_frames", decode)
    client = _client(service)
    try:
        r = client.fetch(f"/api/v1/check/{A}", method="POST", body=_forward(DEEP), request_timeout=240,
                         headers={"Authorization": f"token {token}"}, raise_error=False)
    finally:
        client.tearDown()
        service.close()
    said = json.loads(r.body)
    assert unreadable, "no nesting tried was past the judge's depth and within the monitor's: retune DEEP"
    assert "not counted" not in (said.get("error") or ""), said
    assert r.code == 200, (r.code, said)
    left = limits.take(store, "alice", A, rules).left + 1
    assert left == pytest.approx(before - 1, abs=0.01)      # the check was spent
