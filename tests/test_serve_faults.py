"""A check that fails inside the service: given back only when the kit's machine failed (KitFault), counted
otherwise, so a submission that could steer a judge bug into an exception gets no free, unlimited oracle.

In process, with tornado's own test client and the judge replaced by one that raises: what is tested is the
handler's accounting, not the judge."""
import json

import pytest
import tornado.testing

from attnkit.engine.results import KitFault
from attnkit.serve import app, limits, tokens
from attnkit.serve.store import Store
from tests.fixture_course import CONTRACT_CELL, NAME as A
from tests.notebooks import solution_source, submission

pytestmark = pytest.mark.usefixtures("fixture_course")


def _levels(error, tmp_path, monkeypatch):
    """(status, answer, checks left before, checks left after) of one check whose judging raises ``error``."""
    store = Store(tmp_path / "state")
    token = tokens.add(store, "alice")
    service = app.Service(store, workers=1, queue=2, assignments=[A])

    def judge_fails(self, student, assignment, body):
        raise error
    monkeypatch.setattr(app.Service, "check", judge_fails)
    rules = service.configs[A].check_service
    before = limits.take(store, "alice", A, rules).left + 1         # what a peek costs, given back at once
    limits.give_back(store, "alice", A)

    class Client(tornado.testing.AsyncHTTPTestCase):
        def get_app(self):
            return app.make_app(service)

        def runTest(self):
            pass
    client = Client()
    client.setUp()
    try:
        body = json.dumps(submission(A, {CONTRACT_CELL: solution_source(A, CONTRACT_CELL)})).encode()
        r = client.fetch(f"/api/v1/check/{A}", method="POST", body=body,
                         headers={"Authorization": f"token {token}"}, raise_error=False)
    finally:
        client.tearDown()
        service.close()
    after = limits.take(store, "alice", A, rules).left + 1
    return r.code, json.loads(r.body), before, after


def test_the_kits_own_failure_gives_the_check_back(tmp_path, monkeypatch):
    status, said, before, after = _levels(KitFault("the grading process failed"), tmp_path, monkeypatch)
    assert status == 500 and "not counted" in said["error"]
    assert after == pytest.approx(before, abs=0.01)


def test_any_other_failure_counts_as_a_check(tmp_path, monkeypatch):
    status, said, before, after = _levels(ValueError("a judge bug the submission found"), tmp_path, monkeypatch)
    assert status == 500 and "counts as a check" in said["error"] and "judge bug" not in said["error"]
    assert after == pytest.approx(before - 1, abs=0.01)
