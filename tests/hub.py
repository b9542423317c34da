"""A real JupyterHub on 127.0.0.1 for the check service's hub-mode tests (issue 31): configurable-http-proxy (npm;
`make test` installs it into .cache/chp), a DummyAuthenticator, SimpleLocalProcessSpawner, and the service started by
the hub from `attnkit.serve.hub.configure`, as an instructor's jupyterhub_config.py does. Students ada and ben are
the course's, zed is a hub user outside it. Synchronised by polling, never by sleeping."""
import html.parser
import http.cookiejar
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests import KIT_ROOT
from tests.test_serve import loopback_request

PREFIX = "/services/attnkit-check"
CHP = KIT_ROOT / ".cache" / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"


def chp() -> str:
    found = shutil.which("configurable-http-proxy") or (str(CHP) if CHP.is_file() else None)
    if not found:
        if os.environ.get("CI"):
            pytest.fail("configurable-http-proxy is required in CI (make test installs it from npm into .cache/chp)")
        pytest.skip("configurable-http-proxy is not installed (make test installs it from npm into .cache/chp)")
    return found


def free_port() -> int:
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
c.Authenticator.allowed_users = set({users!r})
c.JupyterHub.load_groups = {{"course": {{"users": {students!r}}}}}
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
          workers={workers}, queue={queue}, command=[{python!r}, "-m", "attnkit"], assignments={assignments!r},
          check_url="http://127.0.0.1:{port}{prefix}")
"""


class Hub:
    """The hub on a free port of 127.0.0.1, started in ``tmp`` (its database, log, the service's state in
    ``tmp/state``, the users' homes in ``tmp/home/USER``); ``students`` are the course's group."""

    def __init__(self, tmp: Path, students=("ada", "ben"), others=("zed",), workers=1, queue=4,
                 assignments=("causal_head",)):
        self.tmp, self.port, self.admin = tmp, free_port(), secrets.token_hex(32)
        (tmp / "state").mkdir()
        (tmp / "jupyterhub_config.py").write_text(CONFIG.format(
            port=self.port, hub_port=free_port(), proxy_api_port=free_port(), service_port=free_port(),
            chp=chp(), tmp=tmp, python=sys.executable, admin_token=self.admin, course=str(KIT_ROOT),
            prefix=PREFIX, users=sorted({*students, *others}), students=list(students), workers=workers,
            queue=queue, assignments=list(assignments)))
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

    def user_token(self, user: str) -> str:
        """A new API token of ``user``'s, made by the hub, carrying the check service's access scope where the user
        holds it (what the token of the user's server carries, without starting a server)."""
        return self.api("POST", f"/users/{user}/tokens",
                        {"scopes": ["access:services!service=attnkit-check"], "note": "check"})["token"]

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
