"""The check service (`attnkit serve`, issue 31): a real server on 127.0.0.1, started as students' instructors
start it, its state in a scratch folder (never the checkout's .attnkit/). Synchronised by polling the health
endpoint, never by sleeping.

On the fixture course (tests/fixture_course/): its example, served alone, with a second assignment beside it in
the course that this server is not asked to serve."""
import hashlib
import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import KIT_ROOT
from attnkit.engine import config
from attnkit.isolation.files import MAX_NOTEBOOK_BYTES
from attnkit.serve import answer, attnkit_check, limits, tokens
from attnkit.serve.store import FILENAME, Store
from tests.conftest import copy_course
from tests.fixture_course import MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course, attnkit, in_body, notebook

OTHER = "week2"           # a second assignment of the served course (`attnkit new`), not served by the server below
PAYLOAD = "QZ7" * 67                              # 201 characters a page must never carry
FULL = f"{MAX_SCORE:g} / {MAX_SCORE:g}"          # the report's score line for full marks (its format, :g)


def _forward(code: str) -> bytes:
    """The fixture course's released notebook answered with its solution, ``code`` run first in the body of the
    student's function (softmax_rows): call it inside ``as_course`` of the fixture course (or a test using the
    ``fixture_course`` fixture). The function is called once for each input of each experiment."""
    return json.dumps(notebook(in_body(code))).encode()


LOOP = "while True:\n    pass"       # hostile: burns a core until the judge's limits (its alarm, its wall clock) end it
# A check that keeps its worker HELD_SECONDS and then scores full marks: what a test needs of a busy worker, where
# the loop's burnt core (the other pytest worker's share of the machine) proved nothing more. Its first call of
# the function sleeps; the experiments share the child, so it sleeps once (within the example's alarm of 20 s
# an experiment: the check still scores full marks).
HELD_SECONDS = 15
HOLD = (f"import time\nif not globals().get('_held'):\n    globals()['_held'] = True\n"
        f"    time.sleep({HELD_SECONDS})")
RAISES = f"raise ValueError({PAYLOAD!r})"


@pytest.fixture(scope="module")
def sent(fixture_course_root) -> SimpleNamespace:
    """What the tests send of the fixture course's example: ``solution`` and ``release`` (the instructor's solution
    notebook and the released one, paths) and, as bytes, the ``loop``, ``hold`` and ``raises`` notebooks (above)."""
    with as_course(fixture_course_root) as root:
        return SimpleNamespace(solution=root / "solutions" / A / f"{A}.ipynb",
                               release=root / "release" / A / f"{A}.ipynb",
                               loop=_forward(LOOP), hold=_forward(HOLD), raises=_forward(RAISES))


def loopback_request(port, method, path, body=None, headers=None, timeout=300):
    """(status, headers with lower-case names, body) of one HTTP request to 127.0.0.1:``port``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`attnkit serve` in a subprocess, on a free port of 127.0.0.1: ``assignment`` of ``course`` (without one,
    every assignment of the course), whose checks ``check`` posts by default."""

    def __init__(self, state: Path, workers: int = 2, queue: int = 16, course: Path = KIT_ROOT,
                 assignment: str | None = None):
        self.state, self.workers, self.queue, self.proc = state, workers, queue, None
        self.course, self.assignment = course, assignment

    def start(self) -> "Server":
        self.port = _free_port()
        self.log = open(self.state / f"serve-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnkit", "serve", "--port", str(self.port), "--course-dir", str(self.course),
             "--state-dir", str(self.state), *(("--assignment", self.assignment) if self.assignment else ()),
             "--workers", str(self.workers), "--queue", str(self.queue)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300                   # warm-up on a loaded machine
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.state / f"serve-{self.port}.log").read_text()
            try:
                self.health()
                return self
            except OSError:
                time.sleep(0.1)                             # polling the port, not waiting for an event
        raise AssertionError("the service did not answer its health check in 300 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()

    def request(self, method, path, body=None, headers=None, timeout=300):
        return loopback_request(self.port, method, path, body, headers, timeout)

    def health(self) -> dict:
        """GET /, with the load figures: the key the service wrote to its state folder (a tokenless peer gets
        neither, tests/test_attack_serve3.py)."""
        key = self.state / f"serve-{self.proc.pid}.load-key"
        headers = {"X-Attnkit-Load-Key": key.read_text().strip()} if key.is_file() else {}
        status, _, body = self.request("GET", "/", timeout=10, headers=headers)
        assert status == 200
        return json.loads(body)

    def check(self, token, body, assignment=None):
        assignment = assignment or self.assignment
        assert assignment, "which assignment: this server serves every one of its course"
        headers = {"Authorization": f"token {token}"} if token is not None else {}
        status, headers, raw = self.request("POST", f"/api/v1/check/{assignment}", body, headers)
        return status, headers, json.loads(raw)

    def wait_admitted(self, n: int, busy: threading.Thread) -> None:
        deadline = time.monotonic() + 120
        while self.health()["admitted"] < n:
            assert busy.is_alive() and time.monotonic() < deadline, "the slow check never started"
            time.sleep(0.02)


def cli(*args, state, course: Path = KIT_ROOT) -> subprocess.CompletedProcess:
    """`attnkit ARGS` on ``course`` (a token is the state folder's alone: any course) with the service's state."""
    return subprocess.run([sys.executable, "-m", "attnkit", *args, "--course-dir", str(course),
                           "--state-dir", str(state)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    return tmp_path_factory.mktemp("serve-state")


@pytest.fixture(scope="module")
def two_assignments(tmp_path_factory, fixture_course_root) -> Path:
    """The fixture course with OTHER beside its example, as an instructor adds one (`attnkit new`, unreleased)."""
    root = copy_course(fixture_course_root, tmp_path_factory.mktemp("served") / "fixture")
    attnkit("new", OTHER, cwd=root)
    return root


@pytest.fixture(scope="module")
def server(state, two_assignments):
    s = Server(state, course=two_assignments, assignment=A).start()
    yield s
    s.stop()


ISSUED = []


def token_for(state, student: str) -> str:
    """A token made as an instructor makes one: `attnkit tokens add` prints it as its last line."""
    done = cli("tokens", "add", student, state=state)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip().splitlines()[-1]
    ISSUED.append(token)
    return token


def test_the_solution_scores_full_and_the_release_nothing(server, state, sent):
    health = server.health()
    assert health["status"] == "ok" and health["assignments"] == [A]
    token = token_for(state, "ada")
    status, _, got = server.check(token, sent.solution.read_bytes())
    assert status == 200, got
    assert got["score"] == got["max_score"] == MAX_SCORE
    assert got["checks"] and all(c["passed"] for c in got["checks"])
    assert got["checks_left"] == 2 and FULL in got["feedback_html"]
    status, _, got = server.check(token, sent.release.read_bytes())
    assert status == 200 and got["score"] == 0 and got["max_score"] == MAX_SCORE and got["checks_left"] == 1
    # every check is recorded, with the notebook's digest; the report counts them
    rows = Store(state).query("SELECT student, score, notebook_sha256, tier FROM checks WHERE student = 'ada' "
                              "ORDER BY id")
    assert rows == [("ada", float(MAX_SCORE), hashlib.sha256(sent.solution.read_bytes()).hexdigest(), "checks"),
                    ("ada", 0.0, hashlib.sha256(sent.release.read_bytes()).hexdigest(), "checks")]
    report = cli("checks", "report", A, state=state, course=server.course)
    assert report.returncode == 0, report.stderr
    line = next(l for l in report.stdout.splitlines() if l.startswith("ada "))
    assert line.split()[1:6] == ["2", "2", f"{MAX_SCORE:g}", "0", f"{MAX_SCORE:g}"]


def test_no_valid_token_is_401(server, state, sent):
    body = sent.release.read_bytes()
    assert server.check(None, body)[0] == 401
    assert server.check("not-a-token", body)[0] == 401
    status, headers, _ = server.request("POST", f"/api/v1/check/{A}", body,
                                        {"Authorization": "Bearer " + token_for(state, "bea")})
    assert status == 401 and "www-authenticate" in headers          # only `token <T>`
    replaced = token_for(state, "bea")                      # a new token for bea: the first stops working
    assert server.check(replaced, b"{}")[0] == 200
    assert server.check(ISSUED[-2], b"{}")[0] == 401
    revoked = token_for(state, "cyd")
    assert server.check(revoked, b"{}")[0] == 200
    done = cli("tokens", "revoke", "cyd", state=state)
    assert done.returncode == 0, done.stderr
    assert server.check(revoked, b"{}")[0] == 401
    listing = cli("tokens", "list", state=state).stdout
    assert "cyd" in listing and "revoked" in listing.split("cyd", 1)[1].splitlines()[0]


def test_an_unknown_assignment_is_404(server, state):
    token = token_for(state, "dan")
    assert server.check(token, b"{}", assignment="no_such_thing")[0] == 404
    assert (server.course / "autograder" / OTHER / "manifest.toml").is_file()    # an assignment of the course ...
    assert server.check(token, b"{}", assignment=OTHER)[0] == 404     # ... not served by this one


def test_a_body_past_the_cap_is_refused_on_its_headers(server, state):
    token = token_for(state, "eli")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    started = time.monotonic()
    conn.putrequest("POST", f"/api/v1/check/{A}")
    conn.putheader("Authorization", f"token {token}")
    conn.putheader("Content-Length", str(MAX_NOTEBOOK_BYTES + 1))
    conn.endheaders()
    conn.send(b"{" * 4096)                       # 4 KiB of the 64 MiB announced, then wait for the answer
    r = conn.getresponse()
    assert r.status == 413 and b"MiB" in r.read()
    assert time.monotonic() - started < 30
    conn.close()
    # and a body sent without its length is counted as it comes
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.putrequest("POST", f"/api/v1/check/{A}")
    conn.putheader("Authorization", f"token {token}")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    chunk = b" " * 2**20
    try:
        for _ in range(MAX_NOTEBOOK_BYTES // len(chunk) + 2):
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass                                     # the service answered and closed: what it refused it left unread
    r = conn.getresponse()
    assert r.status == 413
    conn.close()
    assert server.check(token, b"{}")[0] == 200          # the refusals cost no check
    assert server.check(token, b"{}")[2]["checks_left"] == 1


def test_past_the_burst_is_429_for_that_student_only(server, state, sent):
    token, other = token_for(state, "fay"), token_for(state, "gus")
    answers = [server.check(token, b"{}")[2] for _ in range(3)]
    assert [a["checks_left"] for a in answers] == [2, 1, 0]
    assert "retry_after" not in answers[1] and 500 <= answers[2]["retry_after"] <= 600      # when none is left
    status, headers, got = server.check(token, b"{}")
    assert status == 429 and 500 <= int(headers["retry-after"]) <= 1200      # 6/hour: 10 minutes a check
    status, _, got = server.check(other, sent.release.read_bytes())
    assert status == 200 and got["checks_left"] == 2
    # an instructor's grant: three more, above the burst
    done = cli("tokens", "grant", "fay", A, "3", state=state, course=server.course)
    assert done.returncode == 0, done.stderr
    assert [server.check(token, b"{}")[2]["checks_left"] for _ in range(3)] == [2, 1, 0]
    assert server.check(token, b"{}")[0] == 429


def test_a_hostile_notebook_costs_only_its_own_turn(server, state, sent):
    slow, quick = token_for(state, "hal"), token_for(state, "ivy")
    answers = {}
    busy = threading.Thread(target=lambda: answers.setdefault("loop", server.check(slow, sent.loop)))
    busy.start()
    server.wait_admitted(1, busy)
    status, _, got = server.check(quick, sent.solution.read_bytes())       # judged beside it, on the other worker
    assert status == 200 and got["score"] == MAX_SCORE
    assert busy.is_alive(), "the infinite loop was judged before the solution: nothing was proven"
    busy.join(300)
    status, _, got = answers["loop"]
    assert status == 200 and got["score"] < MAX_SCORE and got["checks_left"] == 2
    status, _, got = server.check(slow, sent.raises)
    assert status == 200 and got["score"] < MAX_SCORE
    text = json.dumps(got)
    assert PAYLOAD[:9] not in text and "QZ7QZ7" not in text        # the exception's own text never comes back
    assert max(len(c["message"] or "") for c in got["checks"]) < 600


def test_tokens_are_kept_only_as_hashes(server, state):
    assert ISSUED, "the tests above issued tokens"
    db = (state / FILENAME).read_bytes()
    for token in ISSUED:
        assert token.encode() not in db
    assert tokens.digest(ISSUED[-1]).encode() in db
    assert stat.S_IMODE((state / FILENAME).stat().st_mode) == 0o600


def until(condition, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


@contextmanager
def stopped_after(server):
    try:
        yield server
    finally:
        server.stop()


def test_a_full_queue_is_503_and_the_bucket_survives_a_restart(tmp_path, fixture_course_root, sent):
    one = Server(tmp_path, workers=1, queue=1, course=fixture_course_root, assignment=A).start()
    with stopped_after(one):
        slow, other = token_for(tmp_path, "jon"), token_for(tmp_path, "kim")
        # uploads held at once are bounded too: (queue + workers) bodies of the cap, here two
        held = []
        for holder in (token_for(tmp_path, "kit"), token_for(tmp_path, "lou")):    # one upload a student at once
            conn = http.client.HTTPConnection("127.0.0.1", one.port, timeout=60)
            conn.putrequest("POST", f"/api/v1/check/{A}")
            conn.putheader("Authorization", f"token {holder}")
            conn.putheader("Content-Length", str(MAX_NOTEBOOK_BYTES))
            conn.endheaders()
            conn.send(b" " * (MAX_NOTEBOOK_BYTES - 1))            # all but the last byte: the body is held
            held.append(conn)
        until(lambda: one.health()["buffered_bytes"] == 2 * (MAX_NOTEBOOK_BYTES - 1), "the uploads held")
        status, headers, got = one.check(other, b" " * 100 + b"{}")
        assert status == 503 and int(headers["retry-after"]) >= 1
        for conn in held:
            conn.close()                                            # never finished: no check, nothing kept
        until(lambda: one.health()["buffered_bytes"] == 0, "the closed uploads let go")
        busy = threading.Thread(target=lambda: one.check(slow, sent.hold))
        busy.start()
        one.wait_admitted(1, busy)
        status, headers, got = one.check(other, b"{}")
        assert status == 503 and int(headers["retry-after"]) >= 1 and got["retry_after"] >= 1
        assert busy.is_alive()                       # the 503 came while the worker was held, not after
        busy.join(300)
        assert [one.check(other, b"{}")[2]["checks_left"] for _ in range(3)] == [2, 1, 0]  # the 503 cost nothing
    again = Server(tmp_path, workers=1, queue=1, course=fixture_course_root, assignment=A).start()
    with stopped_after(again):
        assert again.check(other, b"{}")[0] == 429          # the database remembers
        assert again.check(slow, b"{}")[2]["checks_left"] == 1


# The client, against the same server: one sentence for each refusal.

def test_the_client_says_why_in_one_sentence(server, state, sent, tmp_path, capsys):
    nb = tmp_path / f"{A}.ipynb"
    nb.write_bytes(sent.release.read_bytes())
    url = f"http://127.0.0.1:{server.port}"
    token = token_for(state, "lea")
    got = attnkit_check.check(A, notebook=nb, url=url, token=token)
    assert got["score"] == 0 and f"0 / {MAX_SCORE:g}" in capsys.readouterr().out
    for _ in range(2):
        attnkit_check.post(A, nb, url, token)
    with pytest.raises(attnkit_check.CheckRefused, match=r"used your checks .*try again in \d+ minutes"):
        attnkit_check.post(A, nb, url, token)
    with pytest.raises(attnkit_check.CheckRefused, match="did not accept your token"):
        attnkit_check.post(A, nb, url, "wrong")
    with pytest.raises(attnkit_check.CheckRefused, match="no such assignment"):
        attnkit_check.post("nope", nb, url, token)
    with pytest.raises(attnkit_check.CheckRefused, match="cannot be reached"):
        attnkit_check.post(A, nb, f"http://127.0.0.1:{_free_port()}", token)
    assert attnkit_check._sentence(413, None, {}).startswith("Your notebook is too large")
    assert "try again in 2 minutes" in attnkit_check._sentence(503, "61", {})
    assert attnkit_check.check(A, notebook=nb, url=url, token="wrong") is None
    assert capsys.readouterr().out.count("\n") == 1


# Without a server: the manifest's table, the tiers, the bucket.

def _manifest(tmp_path, table: str, course: Path):
    """The example's manifest (of ``course``, the fixture course) with ``table`` added before its [limits]."""
    text = (course / "autograder" / A / "manifest.toml").read_text()
    assert text.count("[limits]") == 1
    path = tmp_path / "manifest.toml"
    path.write_text(text.replace("[limits]", table + "\n[limits]"))
    return config.parse(path)


def test_the_check_service_table(tmp_path, fixture_course):
    assert config.load(A).check_service == config.CheckService()      # the defaults
    cfg = _manifest(tmp_path, '[check_service]\nbefore = "score"\nafter = "diagnosis"\n'
                              'deadline = 2027-01-15T23:59:00+01:00\nrate = "2/minute"\nburst = 5\n', fixture_course)
    rules = cfg.check_service
    assert rules.per_second == pytest.approx(1 / 30) and rules.burst == 5
    cut = datetime(2027, 1, 15, 22, 59, tzinfo=timezone.utc)
    assert rules.tier(cut - timedelta(seconds=1)) == "score" and rules.tier(cut) == "diagnosis"
    cfg = _manifest(tmp_path, '[check_service]\ndeadline = "2027-01-15T23:59:00Z"', fixture_course)
    assert cfg.check_service.deadline
    for bad in ('before = "all"', 'deadline = "2027-01-15T23:59:00"', 'rate = "lots"', "burst = 0", "speed = 1"):
        with pytest.raises(ValueError, match="check_service"):
            _manifest(tmp_path, f"[check_service]\n{bad}", fixture_course)


def test_what_each_tier_shows(fixture_course):
    cfg = config.load(A)
    visible = {c.id for c in cfg.checks if c.visible}
    hidden = {c.id for c in cfg.checks} - visible
    assert visible and hidden, "the example has a visible check and a hidden one"
    result = {"assignment": A, "score": 1.0, "max_score": float(MAX_SCORE), "error": None,
              "attention": {"caption": "x", "expected": [[1.0]], "student": [[1.0]]},
              "checks": [{"id": c.id, "title": c.title, "passed": False, "points": 0.0, "max_points": c.points,
                          "message": f"why {c.id}", "diagnosis": "the mask"} for c in cfg.checks]}
    shown = {t: answer.shaped(result, cfg, t) for t in config.TIERS}
    assert {c["id"] for c in shown["visible"]["checks"]} == visible
    assert all(c["message"] is None for c in shown["score"]["checks"] if c["id"] not in visible)
    assert len(shown["score"]["checks"]) == len(cfg.checks)
    assert all(c["message"] == f"why {c['id']}" for c in shown["checks"]["checks"])
    assert all("diagnosis" not in c for c in shown["checks"]["checks"]) and shown["checks"]["attention"] is None
    assert all(c["diagnosis"] == "the mask" for c in shown["diagnosis"]["checks"])
    assert shown["diagnosis"]["attention"] and all(s["score"] == 1.0 for s in shown.values())
    page = answer.html(shown["score"])
    assert answer.NOT_YET in page and all(f"why {c}" not in page for c in hidden)
    assert all(f"why {c}" in page for c in visible)
    assert "data:image/png" not in page and "data:image/png" in answer.html(shown["diagnosis"])


def test_the_bucket(tmp_path):
    store, rules = Store(tmp_path), config.CheckService(rate="6/hour", burst=3)
    t = 1_000_000.0
    assert [limits.take(store, "s", "a", rules, t).left for _ in range(3)] == [2, 1, 0]
    refused = limits.take(store, "s", "a", rules, t)
    assert not refused.allowed and refused.retry_after == 600
    assert limits.take(store, "s", "a", rules, t + 599).allowed is False
    assert limits.take(store, "s", "a", rules, t + 600).allowed is True
    assert limits.take(store, "s", "a", rules, t + 10**6).left == 2          # refilled to the burst, no more
    assert limits.grant(store, "s", "a", 10, rules, t + 10**6) == 12
    assert limits.take(store, "s", "a", rules, t + 2 * 10**6).left == 11     # a grant outlasts the refill


def test_the_client_shows_html_in_jupyter(monkeypatch):
    import IPython
    import IPython.display
    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", shown.append)
    got = {"assignment": "a", "score": 3.0, "max_score": 20.0, "checks": [], "feedback_html": "<p>report</p>",
           "checks_left": 0, "retry_after": 125}
    monkeypatch.setattr(attnkit_check, "post", lambda *a, **k: got)
    monkeypatch.setattr(attnkit_check, "_configured", lambda url, token: ("http://127.0.0.1:9", "t"))
    monkeypatch.setattr(attnkit_check, "_notebook_path", lambda notebook, assignment: "a.ipynb")
    monkeypatch.setattr(attnkit_check, "save", lambda path: None)      # saved (tests/test_check_save.py)
    assert attnkit_check.check("a") is None             # the cell shows the report alone
    assert [h.data for h in shown] == ['<div><iframe sandbox="" srcdoc="&lt;p&gt;report&lt;/p&gt;" '
                                      'style="width:100%;height:14em;border:0"></iframe></div>',
                                      "<p>Checks left now: 0 (the next in 3 minutes).</p>"]
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)         # a plain Python: text, and the answer
    assert attnkit_check.check("a") is got and len(shown) == 2
