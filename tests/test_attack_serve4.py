"""The check service attacked again (a student, another hub user, a program on the machine): each test is one
attack, asserting it is contained. In process, with tornado's own test client (tests/test_serve_faults.py does
the same): no warm-up, so the file runs in well under two minutes; the judge is the real one where the attack
goes through it.

On the fixture course (tests/fixture_course/): the service in process grades it (the ``fixture_course`` fixture)."""
import http.server
import json
import socket
import threading
from contextlib import contextmanager

import pytest
import tornado.testing

from attnkit.isolation import framing
from attnkit.isolation.framing import decode_frames, encode_frame
from attnkit.serve import app, limits, tokens
from attnkit.serve.store import Store
from tests.fixture_course import NAME as A


def _client(service):
    """Tornado's test client on ``service``'s routes (``prefix`` as under a hub): set up, to be torn down."""
    class Client(tornado.testing.AsyncHTTPTestCase):
        def get_app(self):
            return app.make_app(service, "/services/attnkit-check/" if service.hub else "/")

        def runTest(self):
            pass
    client = Client()
    client.setUp()
    return client


class _Hub(http.server.BaseHTTPRequestHandler):
    """A hub whose API answers every request with ``status`` (a hub failing, or the service's URL for it wrong)."""
    status = 502

    def do_GET(self):
        self.send_response(self.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@contextmanager
def _hub(how: str):
    """The hub's API URL: a closed port (the hub down), or a hub answering ``how`` (an HTTP status)."""
    if how == "closed":
        with socket.socket() as s:              # bound, never listening, then closed: a connection is refused
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        yield f"http://127.0.0.1:{port}/hub/api"
        return
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Hub", (_Hub,), {"status": int(how)}))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hub/api"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("how", ["closed", "502", "404"])
def test_a_hub_that_does_not_answer_is_503_with_retry_after_and_charges_no_one(tmp_path, how,
                                                                                fixture_course):
    """docs/security.md: "The hub not answering: a check is refused with 503 and Retry-After before the bucket is
    charged". A HubAuth whose hub is a closed port is the hub down (HubAuth raises tornado's HTTPError); one that
    answers 502 is the hub failing, 404 the service's URL for it wrong: none of them says who the student is."""
    from jupyterhub.services.auth import HubAuth
    from attnkit.serve.hub import HubIdentity
    store = Store(tmp_path / "state")
    with _hub(how) as api_url:
        down = HubAuth(api_url=api_url, api_token="x" * 32, access_scopes={"access:services!service=attnkit-check"})
        service = app.Service(store, workers=1, queue=2, assignments=[A], hub=HubIdentity(down))
        rules = service.configs[A].check_service
        limits.take(store, "ada", A, rules)                 # ada has a bucket: one check spent of the burst
        level = store.query("SELECT tokens FROM buckets")[0][0]
        client = _client(service)
        try:
            r = client.fetch(f"/services/attnkit-check/api/v1/check/{A}", method="POST", body=b"{}" * 1000,
                             headers={"Authorization": "token " + "t" * 40}, raise_error=False)
        finally:
            client.tearDown()
            service.close()
    assert r.code == 503 and int(r.headers["Retry-After"]) >= 1, (r.code, r.body)
    assert json.loads(r.body)["error"] == app.SAY[503]
    assert store.query("SELECT tokens FROM buckets") == [(level,)]          # no bucket touched, none made
    assert store.query("SELECT COUNT(*) FROM checks") == [(0,)]


# A submission steering the judge into a free check by a frame nested past the judge's depth and within the
# monitor's: tests/course/test_attack_serve_deep.py (it needs an assignment with many experiments, one try each).


def test_a_malformed_frame_keeps_the_frames_before_it():
    """The mechanism, on its own: the judge's reader keeps the whole frames before one it cannot read (so the
    monitor's "started" stands, and the check is the submission's, counted)."""
    deep = b'{"meta": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b'}, "arrays": {}, "payload": 0}'
    started = encode_frame({"kind": "started"})
    with pytest.raises(framing.WireError) as e:
        decode_frames(started + framing.LENGTH.pack(len(deep)) + deep)
    assert [m for m, _ in e.value.frames] == [{"kind": "started"}]


def test_a_hub_that_hangs_is_503_in_seconds_not_minutes(tmp_path, monkeypatch, fixture_course):
    """A hub that takes the connection and never answers (hung, or its port's backlog full): HubAuth's HTTP client
    waits 300 s (aiohttp's default), the length of the client's own wait, so the student got no answer at all
    (the client's "cannot be reached") instead of the 503 the hub down gets. The service waits HUB_SECONDS."""
    from jupyterhub.services.auth import HubAuth
    from attnkit.serve import hub
    from attnkit.serve.hub import HubIdentity
    monkeypatch.setattr(hub, "HUB_SECONDS", 1, raising=False)
    monkeypatch.setenv("ASYNC_TEST_TIMEOUT", "15")       # the test client's wait: well past the service's
    store = Store(tmp_path / "state")
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)                      # connections complete in the backlog; nothing ever reads them
        auth = HubAuth(api_url=f"http://127.0.0.1:{hung.getsockname()[1]}/hub/api", api_token="x" * 32,
                       access_scopes={"access:services!service=attnkit-check"})
        service = app.Service(store, workers=1, queue=2, assignments=[A], hub=HubIdentity(auth))
        client = _client(service)
        try:
            r = client.fetch(f"/services/attnkit-check/api/v1/check/{A}", method="POST", body=b"{}",
                             headers={"Authorization": "token " + "t" * 40}, raise_error=False)
        finally:
            client.tearDown()
            service.close()
    assert r.code == 503 and int(r.headers["Retry-After"]) >= 1, (r.code, r.body)
    assert store.query("SELECT COUNT(*) FROM buckets") == [(0,)]


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_another_method_with_a_body_judges_nothing_charges_nothing_and_holds_no_turn(tmp_path, method,
                                                                                      fixture_course):
    """Tornado runs `prepare` (which makes the student's request the one under way) and reads the whole body for
    any method it knows before it answers 405 for one the handler lacks: that request must leave no check
    charged and no turn held (the student's next check is not 409)."""
    store = Store(tmp_path / "state")
    token = tokens.add(store, "alice")
    service = app.Service(store, workers=1, queue=2, assignments=[A])
    judged = []
    service.check = lambda student, assignment, body: (judged.append(student) or {"score": 0.0}, 0.0)
    client = _client(service)
    auth = {"Authorization": f"token {token}"}
    try:
        r = client.fetch(f"/api/v1/check/{A}", method=method, body=b"{}" * 1000, headers=auth, raise_error=False,
                         allow_nonstandard_methods=True)
        assert r.code == 405, (r.code, r.body)
        assert judged == [] and store.query("SELECT COUNT(*) FROM buckets") == [(0,)]
        assert service.under_way == set() and service.buffered == 0
        r = client.fetch(f"/api/v1/check/{A}", method="POST", body=b"{}", headers=auth, raise_error=False)
        assert r.code == 200 and judged == ["alice"], (r.code, r.body)
    finally:
        client.tearDown()
        service.close()
