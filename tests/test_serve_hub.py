"""The check service's JupyterHub mode (issue 31), under a real JupyterHub on 127.0.0.1: configurable-http-proxy
(npm), a DummyAuthenticator, SimpleLocalProcessSpawner, and the service started by the hub (tests/hub.py).

Two students of the course (ada, ben) log in and start their servers; zed is a hub user outside the course. Each
check is sent with the token the hub gave the student's server (JUPYTERHUB_API_TOKEN, read from that server's
environment as its kernels inherit it), through the hub's proxy, by the client module the release ships
(attnkit_check.py) with nothing typed. Synchronised by polling, never by sleeping."""
import json
import secrets
import shutil
import time

import pytest

from tests import KIT_ROOT
from attnkit.serve import attnkit_check
from attnkit.serve.store import Store
from tests.hub import PREFIX, Hub, login

SOLUTION = KIT_ROOT / "solutions" / "causal_head" / "causal_head.ipynb"
RELEASE = KIT_ROOT / "release" / "causal_head" / "causal_head.ipynb"


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
