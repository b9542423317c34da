"""Attacks on the check service (third red team): a student with a token, a student's script, or a peer on
127.0.0.1, against a real `attnkit serve` (tests/test_serve.py's) or a real JupyterHub (tests/test_serve_hub.py's).
Each test is an attack; it passes when the attack fails. Synchronised by polling, never by sleeping.

On the fixture course (tests/fixture_course/): the server, and the service in process, serve its example."""
import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attnkit.isolation.files import MAX_NOTEBOOK_BYTES
from attnkit.serve import attnkit_check
from tests.fixture_course import MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import in_body, notebook
from tests.test_serve import Server, _free_port, sent, stopped_after, token_for, until  # noqa: F401 - sent: a fixture
from tests.test_attack_serve import _answered, _post_raw, _status


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    return tmp_path_factory.mktemp("attack-serve3-state")


@pytest.fixture(scope="module")
def one(state, fixture_course_root):
    """One worker, two admitted: its upload budget is (2 + 1) bodies of the cap."""
    s = Server(state, workers=1, queue=2, course=fixture_course_root, assignment=A).start()
    with stopped_after(s):
        yield s


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# Denying everyone: uploads abandoned half-way. The budget counts a body only while its connection is open; the
# handler's memory of it must go with the connection too.

def test_an_abandoned_upload_leaves_nothing_held_in_the_service(one, state):
    token = token_for(state, "quitter")
    body = os.urandom(MAX_NOTEBOOK_BYTES - 2**20)         # random: no page of it is shared or compressible
    budget = (one.queue + one.workers) * MAX_NOTEBOOK_BYTES
    before = _rss(one.proc.pid)
    for _ in range(5):                                    # 5 x 63 MiB, past the 192 MiB budget
        s = _post_raw(one.port, token, str(MAX_NOTEBOOK_BYTES), body)
        until(lambda: _answered(s) or one.health()["buffered_bytes"] == len(body), "the upload held")
        assert not _answered(s)
        s.close()                                         # abandoned: the student never finishes it
        until(lambda: one.health()["buffered_bytes"] == 0, "the abandoned upload let go")
    for _ in range(200):                                  # ordinary traffic: what the service's own gc would see
        one.health()
    grown = _rss(one.proc.pid) - before
    assert grown < budget, f"the service holds {grown / 2**20:.0f} MiB for 5 uploads nobody finished"
    # and the quitter still checks (one request under way at a time: none is left behind)
    assert one.check(token, b"{}")[0] == 200


# Another student's attempts through the unauthenticated health endpoint.

def test_the_health_endpoint_tells_a_peer_nothing_of_a_classmates_upload(one, state):
    ada = token_for(state, "ada3")
    size = 123_457                                        # what ada's notebook weighs, to the byte
    s = _post_raw(one.port, ada, str(size + 1), b"x" * size)
    told = None
    try:
        for _ in range(500):                              # a peer with no token at all, polling as ada uploads
            status, _, body = one.request("GET", "/", timeout=10)
            health = json.loads(body)
            if size in health.values():
                told = health
                break
        # the instructor, with the key the service wrote to its state folder, sees the upload (so the check above
        # looked where the figure would be): an answer that told nobody would pass it too
        until(lambda: one.health().get("buffered_bytes") == size, "the upload seen with the load key")
    finally:
        s.close()
    assert told is None, f"the health endpoint told a tokenless peer: {told}"


# Handing in through the service, or another route to the judge: there is none.

def test_the_service_takes_no_hand_in_and_no_other_route(one, state):
    token = token_for(state, "handin")
    auth = {"Authorization": f"token {token}"}
    for method, path in [("POST", f"/api/v1/submit/{A}"), ("POST", f"/api/v1/check/{A}/submit"),
                         ("PUT", f"/api/v1/check/{A}"), ("POST", f"/api/v1/check/{A}/"),
                         ("POST", "/api/v1/check/"), ("POST", f"//api/v1/check/{A}"),
                         ("POST", f"/api/v1/check/{A}?student=someone&timestamp=2020-01-01")]:
        status, headers, raw = one.request(method, path, b"{}", auth)
        assert status in (404, 405) or (path.endswith("2020-01-01") and status == 200), (method, path, status)
    # the query string named someone else: the check is still the token's
    from attnkit.serve.store import Store
    rows = Store(state).query("SELECT student FROM checks WHERE student IN ('handin', 'someone')")
    assert rows == [("handin",)]
    assert not any(p.name == "submitted" for p in Path(state).rglob("*"))


# JupyterHub mode, in the service's own handler (an in-process service whose hub answers slowly): a check whose
# connection closes while the hub is asked. Contained: tornado reads nothing of the connection until prepare is
# done, so the close is seen after the student was marked under way, and the close lets go of them.

class _SlowHub:
    """The hub's answer for a token, given only when the test lets it."""

    def __init__(self):
        self.asked, self.go = threading.Event(), None

    async def student(self, authorization):
        self.go = asyncio.Event()
        self.asked.set()
        await self.go.wait()
        return authorization.partition(" ")[2].strip() or None


def test_a_check_dropped_while_the_hub_answers_does_not_lock_its_student_out(tmp_path, fixture_course):
    import tornado.httpserver
    import tornado.netutil
    from attnkit.serve.app import Service, make_app
    from attnkit.serve.store import Store
    hub = _SlowHub()
    service = Service(Store(tmp_path), workers=1, queue=2, assignments=[A], hub=hub)
    service.check = lambda student, assignment, body: ({"score": 0.0}, 0.0)     # no judging: only who may ask
    ready, loop_box = threading.Event(), {}

    def run():
        async def main():
            server = tornado.httpserver.HTTPServer(make_app(service))
            socks = tornado.netutil.bind_sockets(0, "127.0.0.1")
            server.add_sockets(socks)
            loop_box.update(loop=asyncio.get_running_loop(), port=socks[0].getsockname()[1],
                            stop=asyncio.Event())
            ready.set()
            await loop_box["stop"].wait()
            server.stop()
        asyncio.run(main())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(30)
    loop, port = loop_box["loop"], loop_box["port"]
    try:
        s = _post_raw(port, "ada", "2", b"")              # ada's check: headers sent, the hub asked
        assert hub.asked.wait(30)
        s.close()                                         # ada's browser drops it while the hub answers
        for _ in range(50):                               # turns of the service's loop: the close is seen
            _closed_seen(loop)
        loop.call_soon_threadsafe(hub.go.set)             # the hub answers: "ada"
        until(lambda: hub.go.is_set(), "the hub answered")
        hub.asked.clear()
        # ada checks again, with the hub answering at once: her dropped request must not stand in her way
        s = _post_raw(port, "ada", "2", b"")
        assert hub.asked.wait(30)
        loop.call_soon_threadsafe(hub.go.set)
        s.sendall(b"{}")
        status = _status(s)
        s.close()
        assert status != 409, "ada is locked out: her dropped request is still 'under way' in the service"
    finally:
        loop.call_soon_threadsafe(loop_box["stop"].set)
        t.join(30)
        service.close()


def _closed_seen(loop) -> bool:
    """One turn of the service's loop after the close (the close is handled on the loop)."""
    done = threading.Event()
    loop.call_soon_threadsafe(done.set)
    return done.wait(10)


# JupyterHub mode, under a real hub: what a student's server token is worth to whoever catches it. The client
# sends it (JUPYTERHUB_API_TOKEN) with every check; while the service is down (the hub restarting it, its
# 30-90 s warm-up before the port opens), any user of the machine can listen on the service's port, behind the
# hub's own proxy route.

@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from tests.test_serve_hub import Hub
    h = Hub(tmp_path_factory.mktemp("hub3"))
    yield h
    h.stop()


def _service_process(hub) -> tuple[int, dict]:
    """The pid and environment of the `attnkit serve --hub` the hub started."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"--hub" in argv and b"serve" in argv and str(hub.tmp).encode() in b" ".join(argv):
                raw = (proc / "environ").read_bytes()
                return int(proc.name), dict(i.split("=", 1) for i in raw.decode().split("\0") if "=" in i)
        except (OSError, ValueError):
            continue
    raise AssertionError("no attnkit serve --hub under this hub")


class _Catcher(http.server.BaseHTTPRequestHandler):
    caught = []

    def do_POST(self):
        self.caught.append(self.headers.get("Authorization", ""))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"assignment": A, "score": float(MAX_SCORE), "max_score": float(MAX_SCORE),
                           "checks": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_caught_server_token_opens_no_students_server(hub, monkeypatch, tmp_path, sent):
    from tests.test_serve_hub import PREFIX, login
    login(hub, "ada")
    env = hub.start_server("ada")
    pid, service_env = _service_process(hub)
    port = int(service_env["JUPYTERHUB_SERVICE_URL"].rsplit(":", 1)[1].strip("/"))
    os.kill(pid, signal.SIGTERM)                          # the service restarts (an upgrade, a crash, the hub's)
    until(lambda: not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split()[2],
          "the service stopped")
    squatter = None
    deadline = time.monotonic() + 120
    while squatter is None:                               # a peer takes the port before the service has it again
        try:
            squatter = http.server.HTTPServer(("127.0.0.1", port), _Catcher)
        except OSError:
            assert time.monotonic() < deadline, "the port was never free"
            time.sleep(0.05)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        for name in ("ATTNKIT_CHECK_TOKEN", "JPY_SESSION_NAME", "ATTNKIT_CHECK_FILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.setenv("ATTNKIT_CHECK_URL", env["ATTNKIT_CHECK_URL"])
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", env["JUPYTERHUB_API_TOKEN"])
        attnkit_check.post(A, notebook=sent.solution)     # ada checks, as her notebook's cell does
    finally:
        squatter.shutdown()
        squatter.server_close()
    assert _Catcher.caught, "ada's check never reached the squatter"
    stolen = _Catcher.caught[-1]
    assert stolen.partition(" ")[2] == env["JUPYTERHUB_API_TOKEN"]
    # what the caught token opens: ada's own Jupyter server (her files; a kernel running as her)
    status, _, raw = hub.request("PUT", "/user/ada/api/contents/planted.py",
                                 json.dumps({"type": "file", "format": "text", "content": "print('ben')"}).encode(),
                                 {"Authorization": stolen, "Content-Type": "application/json"}, timeout=60)
    planted = (hub.tmp / "home" / "ada" / "planted.py").exists()
    assert status >= 400 and not planted, (
        f"a server token caught on the service's port wrote into ada's server (HTTP {status}): "
        f"{raw[:200]!r}")


# A refund by crashing things: a check is given back only for a fault of the kit before any submission code ran
# (KitFault). A submission that writes garbage into every descriptor it has and kills its parent, at
# import and in its function (softmax_rows), is still a check judged and counted.

SABOTAGE = """
import os as _o, signal as _sg
def _sabotage():
    for _fd in range(0, 256):
        try:
            _o.write(_fd, b"\\x00\\xff{not a frame}" * 4096)
        except OSError:
            pass
    for _p in (_o.getppid(),):
        try:
            _o.kill(_p, _sg.SIGKILL)
        except OSError:
            pass
_sabotage()
"""


def test_crashing_the_grading_process_refunds_no_check(one, state, fixture_course):
    src = SABOTAGE + in_body("_sabotage()")
    token = token_for(state, "wrecker")
    status, _, got = one.check(token, json.dumps(notebook(src)).encode())
    assert status in (200, 500), got
    if status == 200:
        assert got["checks_left"] == 2 and got["score"] < MAX_SCORE, got
    assert one.check(token, b"{}")[2].get("checks_left") == 1      # the sabotage was charged, not given back
    assert one.health()["status"] == "ok"


# A squatter on the service's port while it warms up (the hub restarts it; the warm-up takes 30-90 s).

def test_the_port_is_taken_before_the_warm_up(tmp_path, fixture_course_root):
    """While the service warms up, its port is already its own: a connection is accepted (it waits in the backlog)
    before the first "warm in" line, so no other user of the machine can listen there and collect the tokens that
    students' check cells send. On the old order (listen after the warm-up) no connection is accepted before that
    line, whatever the machine's speed."""
    import socket
    port = _free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnkit", "serve", "--port", str(port), "--course-dir", str(fixture_course_root),
             "--state-dir", str(tmp_path), "--assignment", A], stdout=out, stderr=subprocess.STDOUT)
    try:
        accepted_while_warming = False
        deadline = time.monotonic() + 300
        while b"warm in" not in log.read_bytes():           # read first: the line is not written yet ...
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            with socket.socket() as s:                      # ... so a connection now is made during the warm-up
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    accepted_while_warming = True
                    break
            time.sleep(0.05)
        assert accepted_while_warming, "the port was free until the warm-up ended: " + log.read_text()
        with socket.socket() as squatter:                   # and no one else can listen there
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError):
                squatter.bind(("127.0.0.1", port))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
