"""The check service's JupyterHub mode (issue 31), under a real JupyterHub on 127.0.0.1: configurable-http-proxy
(npm; `make test` installs it into .cache/chp), a DummyAuthenticator, SimpleLocalProcessSpawner, and the service
started by the hub from `attnkit.serve.hub.configure`, as an instructor's jupyterhub_config.py does.

Two students of the course (ada, ben) log in and start their servers; zed is a hub user outside the course. Each
check is sent with the token the hub gave the student's server (JUPYTERHUB_API_TOKEN, read from that server's
environment as its kernels inherit it), through the hub's proxy, by the client module the release ships
(attnkit_check.py) with nothing typed. Synchronised by polling, never by sleeping."""
import html.parser
import http.cookiejar
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests import KIT_ROOT
from attnkit.serve import attnkit_check
from attnkit.serve.store import Store
from tests.test_serve import loopback_request

SOLUTION = KIT_ROOT / "solutions" / "causal_head" / "causal_head.ipynb"
RELEASE = KIT_ROOT / "release" / "causal_head" / "causal_head.ipynb"
PREFIX = "/services/attnkit-check"
CHP = KIT_ROOT / ".cache" / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"


def _chp() -> str:
    found = shutil.which("configurable-http-proxy") or (str(CHP) if CHP.is_file() else None)
    if not found:
        if os.environ.get("CI"):
            pytest.fail("configurable-http-proxy is required in CI (make test installs it from npm into .cache/chp)")
        pytest.skip("configurable-http-proxy is not installed (make test installs it from npm into .cache/chp)")
    return found


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONFIG = """
from attnkit.serve.hub import configure
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.should_start = True
c.JupyterHub.db_url = "sqlite:///{tmp}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{tmp}/cookie_secret"
c.JupyterHub.pid_file = "{tmp}/hub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {{"ada", "ben", "zed"}}
c.JupyterHub.load_groups = {{"course": {{"users": ["ada", "ben"]}}}}
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = "{tmp}/home/{{username}}"
c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 240
c.Spawner.http_timeout = 240
c.JupyterHub.services = [{{"name": "test-admin", "api_token": "{admin_token}"}}]
c.JupyterHub.load_roles = [{{"name": "test-admin", "services": ["test-admin"],
                             "scopes": ["admin:users", "admin:servers", "admin:server_state", "tokens"]}}]
configure(c, course_dir={course!r}, port={service_port}, students_group="course", state_dir="{tmp}/state",
          workers=1, queue=4, command=[{python!r}, "-m", "attnkit"], assignments=["causal_head"],
          check_url="http://127.0.0.1:{port}{prefix}")
"""


class Hub:
    def __init__(self, tmp: Path):
        self.tmp, self.port, self.admin = tmp, _free_port(), secrets.token_hex(32)
        (tmp / "state").mkdir()
        (tmp / "jupyterhub_config.py").write_text(CONFIG.format(
            port=self.port, hub_port=_free_port(), proxy_api_port=_free_port(), service_port=_free_port(),
            chp=_chp(), tmp=tmp, python=sys.executable, admin_token=self.admin, course=str(KIT_ROOT),
            prefix=PREFIX))
        self.log = open(tmp / "hub.log", "wb")
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(tmp / "jupyterhub_config.py")],
                                     cwd=tmp, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        # the hub routes its own API once its managed service answers, which warms first (its fork server, one
        # notebook judged: 30-90 s on a loaded 2-core machine)
        self.until(lambda: self.get("/hub/api/", None)[0] == 200, "the hub answers", 420)
        self.until(lambda: self.get(f"{PREFIX}/", None)[0] == 200, "the check service answers", 60)

    def until(self, condition, what, seconds):
        deadline = time.monotonic() + seconds
        while True:
            assert self.proc.poll() is None, (self.tmp / "hub.log").read_text()[-4000:]
            try:
                if condition():
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"never: {what}\n" + (self.tmp / "hub.log").read_text()[-4000:]
            time.sleep(0.2)                               # polling, not waiting for an event

    def request(self, method, path, body=None, headers=None, timeout=300):
        return loopback_request(self.port, method, path, body, headers, timeout)

    def get(self, path, token="admin"):
        headers = {"Authorization": f"token {self.admin if token == 'admin' else token}"} if token else {}
        status, _, body = self.request("GET", path, headers=headers, timeout=30)
        return status, body

    def api(self, method, path, body=None):
        status, _, raw = self.request(method, f"/hub/api{path}", json.dumps(body).encode() if body else None,
                                      {"Authorization": f"token {self.admin}"}, timeout=60)
        assert status < 400, (status, raw)
        return json.loads(raw) if raw else None

    def server_env(self, user: str) -> dict:
        """The environment the hub started ``user``'s server in (what its kernels inherit)."""
        pid = self.api("GET", f"/users/{user}")["servers"][""]["state"]["pid"]
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)

    def start_server(self, user: str) -> dict:
        self.api("POST", f"/users/{user}/server")
        self.until(lambda: (self.api("GET", f"/users/{user}")["servers"].get("") or {}).get("ready"),
                   f"{user}'s server is ready", 240)
        return self.server_env(user)

    def stop(self):
        import signal
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


class _Form(html.parser.HTMLParser):
    xsrf = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("name") == "_xsrf":
            self.xsrf = attrs.get("value", "")


def login(hub: Hub, user: str) -> http.cookiejar.CookieJar:
    """Log in through the hub's login form as a person does; the browser's cookies."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{hub.port}"
    form = _Form()
    form.feed(opener.open(f"{base}/hub/login", timeout=60).read().decode())
    opener.open(f"{base}/hub/login?next=%2Fhub%2Fhome", urllib.parse.urlencode(
        {"username": user, "password": "any", "_xsrf": form.xsrf}).encode(), timeout=60)
    assert any(c.name.startswith("jupyterhub-") for c in jar), [c.name for c in jar]
    return jar


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(tmp_path_factory.mktemp("hub"))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def servers(hub):
    """ada and ben (the course) and zed (not in it) logged in, their servers running: each server's env."""
    jars = {u: login(hub, u) for u in ("ada", "ben", "zed")}
    return {u: hub.start_server(u) for u in jars}, jars


def _check(hub, token, body, extra=None):
    headers = {"Authorization": f"token {token}", **(extra or {})}
    status, headers, raw = hub.request("POST", f"{PREFIX}/api/v1/check/causal_head", body, headers)
    return status, headers, json.loads(raw)


def _checked_by(hub) -> list[str]:
    return [r[0] for r in Store(hub.tmp / "state").query("SELECT student FROM checks ORDER BY id")]


def _holds(hub, student: str, n: int) -> None:
    """Give ``student`` exactly ``n`` checks now: each test sets what it counts on, so none depends on another's
    run in the same process (pytest-xdist may give a module's tests to two workers, each with a hub of its own)."""
    with Store(hub.tmp / "state").transaction() as db:
        db.execute("INSERT OR REPLACE INTO buckets (student, assignment, tokens, updated) VALUES (?, ?, ?, ?)",
                   (student, "causal_head", float(n), time.time()))


def test_a_student_checks_from_their_server_with_nothing_typed(hub, servers, tmp_path, monkeypatch):
    _holds(hub, "ada", 3)
    before = len(_checked_by(hub))
    env = servers[0]["ada"]
    assert env["ATTNKIT_CHECK_URL"] == f"http://127.0.0.1:{hub.port}{PREFIX}" and env["JUPYTERHUB_API_TOKEN"]
    for name in ("ATTNKIT_CHECK_URL", "ATTNKIT_CHECK_TOKEN", "JUPYTERHUB_API_TOKEN", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))                        # no ~/.attnkit/check
    for name in ("ATTNKIT_CHECK_URL", "JUPYTERHUB_API_TOKEN"):     # what the hub gave the server, nothing else
        monkeypatch.setenv(name, env[name])
    shutil.copy(SOLUTION, tmp_path / "causal_head.ipynb")
    monkeypatch.chdir(tmp_path)
    got = attnkit_check.post("causal_head")
    assert got["score"] == got["max_score"] == 20 and got["checks_left"] == 2
    assert _checked_by(hub)[before:] == ["ada"]


def test_two_students_have_a_limit_each(hub, servers):
    ada, ben = servers[0]["ada"]["JUPYTERHUB_API_TOKEN"], servers[0]["ben"]["JUPYTERHUB_API_TOKEN"]
    _holds(hub, "ada", 2)
    _holds(hub, "ben", 3)
    before = len(_checked_by(hub))
    status, _, got = _check(hub, ben, RELEASE.read_bytes())
    assert status == 200 and got["score"] == 0 and got["checks_left"] == 2
    lefts = [_check(hub, ada, b"{}")[2].get("checks_left") for _ in range(2)]
    assert lefts == [1, 0]
    status, headers, got = _check(hub, ada, b"{}")
    assert status == 429 and int(headers["retry-after"]) > 0
    assert _checked_by(hub)[before:] == ["ben", "ada", "ada"]


def test_a_forged_user_header_names_no_one(hub, servers):
    """ben's token with every header a proxy or a hub might use to name a user: the check is ben's."""
    ben = servers[0]["ben"]["JUPYTERHUB_API_TOKEN"]
    _holds(hub, "ben", 2)
    before = len(_checked_by(hub))
    status, _, _ = _check(hub, ben, b"{}", {"X-Forwarded-User": "ada", "X-Remote-User": "ada",
                                            "X-JupyterHub-User": "ada", "REMOTE_USER": "ada"})
    assert status == 200
    status, _, _ = hub.request("POST", f"{PREFIX}/api/v1/check/causal_head?user=ada", b"{}",
                               {"Authorization": f"token {ben}"})
    assert status == 200
    assert _checked_by(hub)[before:] == ["ben", "ben"]


def test_a_user_outside_the_course_is_403_and_a_made_up_token_401(hub, servers):
    zed = servers[0]["zed"]["JUPYTERHUB_API_TOKEN"]
    before = len(_checked_by(hub))
    status, _, got = _check(hub, zed, RELEASE.read_bytes())
    assert status == 403 and "not among" in got["error"]
    assert _check(hub, secrets.token_hex(16), b"{}")[0] == 401
    assert _check(hub, hub.admin, b"{}")[0] == 403               # a service's token is no student's
    # the client's sentence for zed
    with pytest.raises(attnkit_check.CheckRefused, match="does not count you among"):
        attnkit_check.post("causal_head", notebook=RELEASE, url=f"http://127.0.0.1:{hub.port}{PREFIX}", token=zed)
    assert len(_checked_by(hub)) == before


def test_the_hub_login_cookie_spends_no_check(hub, servers):
    """A page ada opens could send her hub cookies (cross-site); the service reads only the token header."""
    jar = servers[1]["ada"]
    cookies = "; ".join(f"{c.name}={c.value}" for c in jar)
    assert "jupyterhub-" in cookies
    status, _, raw = hub.request("POST", f"{PREFIX}/api/v1/check/causal_head", b"{}", {"Cookie": cookies})
    assert status == 401, raw


def test_a_stopped_servers_token_stops_working(hub, servers):
    """ada's server token, shown to someone else, works only while her server runs (the hub revokes it on stop;
    the service asks the hub on every check, caching nothing)."""
    old = servers[0]["ada"]["JUPYTERHUB_API_TOKEN"]
    _holds(hub, "ada", 0)
    assert _check(hub, old, b"{}")[0] == 429                     # known: ada's, with no check left
    hub.api("DELETE", "/users/ada/server")
    hub.until(lambda: not hub.api("GET", "/users/ada")["servers"], "ada's server stopped", 120)
    status, _, _ = _check(hub, old, b"{}")
    assert status == 401
