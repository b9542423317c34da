"""JupyterHub mode: `attnkit serve --hub`, the check service as a JupyterHub service (issue 31).

The hub says who the student is, so no student handles a token of ours. The notebook's kernel sends the token the
hub gave its single-user server (``JUPYTERHUB_API_TOKEN``, as ``Authorization: token <T>``); the service asks the
hub whose token it is (``HubAuth.user_for_token``: ``GET /hub/api/user`` with that token) and judges the check as
that user's. Nothing the request says besides the token names anyone: no user header, no query, no cookie (a
cookie would let any page a student opens spend their checks).

Who is in the course is the hub's business too, by JupyterHub's own scopes: the course's students hold the
service's access scope (``access:services!service=<name>``, through a role on their group), and the hub grants
their servers' tokens the part of ``Spawner.server_token_scopes`` their owner holds; a token without that scope
is refused (403), whatever it is otherwise allowed. ``configure`` writes that into a jupyterhub_config.py.
"""
from __future__ import annotations

import asyncio
import os
from urllib.parse import urlparse

from attnkit.serve import tokens

SERVICE = "attnkit-check"          # the service's default name on the hub (its URL prefix: /services/attnkit-check/)
ROLE = "attnkit-student"
# the longest a check waits for the hub to say whose token it is (it answers in milliseconds): HubAuth's client
# waits 300 s (aiohttp's default), as long as the student's client itself, so a hung hub left the student with
# no answer at all where a hub that is down gets 503 (tests/test_attack_serve4.py)
HUB_SECONDS = 10


class NotInCourse(Exception):
    """A user the hub knows, without this service's access scope (403)."""


class HubIdentity:
    """Whose a hub token is, asked of the hub at every check: no cache, so a token the hub revoked (the server
    stopped) or a user taken out of the course is refused at once; one local request costs milliseconds beside a
    check's seconds of judging."""

    def __init__(self, hub_auth=None):
        from jupyterhub.services.auth import HubAuth
        # api_url, api_token (the service's own) and access_scopes come from the environment the hub starts a
        # managed service in (JUPYTERHUB_API_URL, JUPYTERHUB_API_TOKEN, JUPYTERHUB_SERVICE_NAME)
        self.hub_auth = hub_auth or HubAuth()
        if not self.hub_auth.access_scopes:
            raise RuntimeError("attnkit serve --hub: no access scope (run it as a JupyterHub service, which sets "
                               "JUPYTERHUB_SERVICE_NAME)")

    async def student(self, authorization: str) -> str | None:
        """The hub user's name, None for no or an unknown token (401); NotInCourse for a user or a service
        without the access scope (403). A hub that does not answer raises tornado's HTTPError (the handler: 503)."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "token" or not token or len(token) > 256:
            return None
        try:
            model = await asyncio.wait_for(self.hub_auth.user_for_token(token, use_cache=False, sync=False),
                                           HUB_SECONDS)
        except asyncio.TimeoutError:
            from tornado.web import HTTPError
            raise HTTPError(504, reason="the hub did not answer in time") from None
        if not model:
            return None
        # a service's token (kind "service") is no student; a user without the scope is not in the course
        if model.get("kind") != "user" or not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            raise NotInCourse(model.get("name"))
        try:
            return tokens.check_student(model.get("name", ""))
        except tokens.TokenProblem:
            raise NotInCourse(model.get("name")) from None


def listen_address() -> tuple[str, int, str]:
    """(bind, port, prefix) of a managed service, from what the hub sets in its environment."""
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{SERVICE}/")
    if not url.port:
        raise RuntimeError("attnkit serve --hub: JUPYTERHUB_SERVICE_URL is not set (run it as a JupyterHub service, "
                           "or give --port)")
    return url.hostname or "127.0.0.1", url.port, prefix


def configure(c, course_dir, port: int, students_group: str, name: str = SERVICE, state_dir=None,
              workers: int = 2, queue: int = 16, check_url: str | None = None, command=None,
              assignments=()) -> None:
    """Add the check service to a JupyterHub config ``c``: the hub starts and stops `attnkit serve --hub` on
    127.0.0.1:``port``; the members of ``students_group`` may use it; every user's server gets the address
    (ATTNKIT_CHECK_URL) and a token that can carry the access scope (JUPYTERHUB_API_TOKEN)."""
    command = command or ["attnkit"]
    argv = [*command, "serve", "--hub", "--course-dir", str(course_dir), "--workers", str(workers),
            "--queue", str(queue)] + (["--state-dir", str(state_dir)] if state_dir else []) + [
            arg for a in assignments for arg in ("--assignment", a)]
    url = f"http://127.0.0.1:{port}"
    # append/update: traitlets' lazy values, so what the config set before (or the default) is kept
    # timeout: the hub waits for the service's port, which opens once it is warm (30-55 s on a 2-core machine)
    c.JupyterHub.services.append({"name": name, "url": url, "command": argv, "display": False, "timeout": 300,
                                  "environment": {k: os.environ[k] for k in ("PATH", "ATTNKIT_DATA_DIR")
                                                  if k in os.environ}})
    access = f"access:services!service={name}"
    c.JupyterHub.load_roles.append({"name": ROLE, "scopes": [access], "groups": [students_group]})
    # the `server` role's activity scope (JupyterHub's default for these tokens) and the access scope: the hub keeps
    # of these only what the server's owner holds, so a user outside the group gets no access scope. Not the role's
    # access:servers!server: the client sends this token with every check, and whoever catches it (a program on
    # the service's port while the service restarts) would open the student's server with it, their files and a
    # kernel as them (tests/test_attack_serve3.py); the server runs and is used without it (tests/test_serve_hub.py)
    c.Spawner.server_token_scopes = ["users:activity!user", access]
    c.Spawner.environment.update({"ATTNKIT_CHECK_URL": check_url or f"{url}/services/{name}"})
