"""`attnkit serve`: the check service, a tornado application for one course.

Warm: each assignment's fork server (attnkit/isolation/zygote.py) is started, and one notebook judged, before
the port opens; every check then costs what judging costs. A check is judged by ``judge.grade`` as every other
path is, with the authenticated student as ``student`` (their own hidden inputs), in a bounded pool of threads:
each thread only waits on the child process that runs the submission, so the IOLoop stays free to answer, and no
submission code runs in this process. The body is written to a private file and read by the judge's own
notebook reader, in a helper process under its caps (attnkit/isolation/untrusted.py), never parsed here.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import os
import re
import resource
import secrets
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import tornado.httpserver
import tornado.netutil
import tornado.web

from attnkit.engine import config, judge, registry
from attnkit.engine.results import KitFault
from attnkit.isolation.files import MAX_NOTEBOOK_BYTES
from attnkit.serve import answer, limits, tokens
from attnkit.serve.store import Store

log = logging.getLogger("attnkit.serve")
API = r"/api/v1/check/([^/]+)"

SAY = {   # one sentence per refusal; the client (attnkit_check.py) has its own for the student
    401: "no valid token: send `Authorization: token <T>` with the token your instructor gave you",
    403: "your hub account is not among this course's students",
    404: "no such assignment in this course",
    409: "you have a check under way: wait for its answer, then check again",
    413: f"the notebook is larger than the {MAX_NOTEBOOK_BYTES // 2**20} MiB the judge reads",
    429: "no checks left for now on this assignment",
    503: "the check service is busy",
    500: "the check service failed on its side; your check was not counted",
}
SAY_COUNTED = "the check service failed while judging this notebook; it counts as a check (tell your instructor)"


class Service:
    """The shared state of one running service: the course's database, its assignments, the pool."""

    def __init__(self, store: Store, workers: int = 2, queue: int = 16, assignments=None, hub=None):
        self.store, self.workers, self.queue = store, max(1, workers), max(1, queue)
        self.hub = hub                          # attnkit.serve.hub.HubIdentity in JupyterHub mode, else None
        self.configs = {a: config.load(a) for a in (assignments or config.assignments())}
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="attnkit-check")
        self.admitted = 0                       # checks running or waiting for a thread (changed on the IOLoop only)
        # the students with a request under way (an upload, a wait or a judging; changed on the IOLoop only): one
        # each, so no student holds more than one body or one place in the queue, whatever their bucket holds
        self.under_way: set[str] = set()
        # bytes of bodies held (arriving, waiting or being judged): the admitted checks' worth, so many uploads
        # at once cannot take the machine's memory before the queue would refuse them
        self.buffered, self.budget = 0, (self.queue + self.workers) * MAX_NOTEBOOK_BYTES
        self.seconds = 2.0                      # a moving estimate of one check's time, for Retry-After
        self.inbox = tempfile.mkdtemp(prefix="attnkit-serve-")      # 0700: the bodies, each while it is judged
        # the load figures (checks admitted, bytes held) move as a classmate uploads: GET / shows them only to a
        # request carrying this key, which the owner of the state folder reads from the file (0600) named by pid
        self.load_key = secrets.token_hex(16)
        self.load_key_file = store.folder / f"serve-{os.getpid()}.load-key"
        fd = os.open(self.load_key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.load_key + "\n")

    def warm(self, log=print) -> None:
        """Start each assignment's fork server and judge its release notebook once (imports, reader, plans)."""
        from attnkit.isolation import sandbox
        for name, cfg in self.configs.items():
            started = time.monotonic()
            zygote = sandbox.prestart(registry.get(name).driver, cfg.contract)
            if zygote is not None:
                zygote.ensure_ready()
            release = registry.course() / "release" / name / f"{cfg.notebook}.ipynb"
            if release.is_file():
                judge.grade(release, name)
            log(f"attnkit serve: {name} warm in {time.monotonic() - started:.1f} s")

    async def student_for(self, authorization: str) -> str | None:
        """Whose request this is, from its ``Authorization: token <T>`` header, or None. The one place that
        knows how students authenticate: a token of ours, or in JupyterHub mode the hub's (attnkit/serve/hub.py,
        which raises NotInCourse for a hub user who is not a student of the course)."""
        if self.hub is not None:
            return await self.hub.student(authorization)
        scheme, _, token = authorization.partition(" ")
        return tokens.student_of(self.store, token.strip()) if scheme.lower() == "token" else None

    def busy(self) -> bool:
        return self.admitted >= self.queue

    def retry_after(self) -> int:
        return max(1, math.ceil(self.seconds * max(1, self.admitted) / self.workers))

    def check(self, student: str, assignment: str, body: bytes) -> dict:
        """Judge ``body`` (a worker thread's work): the answer's JSON, recorded in the course's database."""
        cfg = self.configs[assignment]
        started = time.monotonic()
        fd, path = tempfile.mkstemp(suffix=".ipynb", dir=self.inbox)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            result = judge.grade(path, assignment, student=student)
        finally:
            os.unlink(path)
        judged = time.monotonic() - started
        tier = cfg.check_service.tier()
        shown = answer.shaped(result, cfg, tier)
        shown["feedback_html"] = answer.html(shown)
        limits.record(self.store, student, assignment, result["score"], result["max_score"],
                      hashlib.sha256(body).hexdigest(), tier)
        self.seconds = 0.8 * self.seconds + 0.2 * (time.monotonic() - started)
        return shown, judged

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.inbox, ignore_errors=True)
        self.load_key_file.unlink(missing_ok=True)


class Handler(tornado.web.RequestHandler):
    def initialize(self, service: Service):
        self.service = service

    def set_default_headers(self):
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")

    def refuse(self, status: int, retry_after: int | None = None, **extra) -> None:
        self.set_status(status)
        if retry_after is not None:
            self.set_header("Retry-After", str(retry_after))
        if status == 401:
            self.set_header("WWW-Authenticate", 'token realm="attnkit"')
        self.finish(json.dumps({"error": SAY[status], **({"retry_after": retry_after} if retry_after else {}),
                                **extra}))

    def write_error(self, status_code, **kwargs):      # tornado's own errors (400, 405, 500) as JSON too
        self.finish(json.dumps({"error": self._reason}))


class Health(Handler):
    """GET /: anyone who reaches the service learns that it runs, what it checks and its fixed limits; the load
    (checks admitted, bytes of bodies held), which tells when a classmate checks and what their notebook weighs,
    only a request with ``X-Attnkit-Load-Key`` (the key in ``serve-<pid>.load-key`` of the state folder)."""

    def get(self):
        s = self.service
        health = {"status": "ok", "assignments": sorted(s.configs), "queue": s.queue, "workers": s.workers}
        if hmac.compare_digest(self.request.headers.get("X-Attnkit-Load-Key", "").encode(), s.load_key.encode()):
            health.update(admitted=s.admitted, buffered_bytes=s.buffered)
        self.finish(json.dumps(health))


@tornado.web.stream_request_body
class Check(Handler):
    """POST /api/v1/check/<assignment>: refused on the headers alone when it can be (401, 403, 404, 409, 413), so
    nothing of a refused body is read into memory (in hub mode it is read and discarded first, but for a 413); the
    body is counted as it comes and refused past the cap."""

    async def prepare(self):             # tornado reads no body until it is done
        from attnkit.serve.hub import NotInCourse
        self.body, self.refused, self.held, self.pending = bytearray(), False, 0, None
        self.mine, self.judging = False, False
        # behind the hub's proxy, an answer before the body is read makes the proxy see a reset connection and
        # answer 503 itself: there the refusal waits for the body, which is discarded as it comes (past the cap,
        # the 413 below still closes at once)
        stop = self._stop if self.service.hub is None else self._after_body
        try:
            self.student = await self.service.student_for(self.request.headers.get("Authorization", ""))
        except NotInCourse:
            return stop(403)
        except tornado.web.HTTPError:    # the hub did not answer (HubAuth's error): nothing was counted
            return stop(503, 10)
        if self.student is None:
            return stop(401)
        if self.path_args[0] not in self.service.configs:
            return stop(404)
        length = self.request.headers.get("Content-Length", "0")
        if not re.fullmatch(r"[0-9]{1,20}", length):      # ASCII digits: str.isdigit() takes "²", int() not
            raise tornado.web.HTTPError(400, reason="Content-Length is not a number")
        if int(length) > MAX_NOTEBOOK_BYTES:
            return self._stop(413)
        if self.student in self.service.under_way:
            return stop(409)
        self.service.under_way.add(self.student)
        self.mine = True

    def _after_body(self, status: int, retry_after: int | None = None) -> None:
        self.refused, self.pending = True, (status, retry_after)
        length = self.request.headers.get("Content-Length", "0")
        if not re.fullmatch(r"[0-9]{1,20}", length) or int(length) > MAX_NOTEBOOK_BYTES:   # (tornado's cap bounds a chunked one)
            self._stop(status, retry_after)

    def _stop(self, status: int, retry_after: int | None = None) -> None:
        self.refused, self.body = True, bytearray()
        self._release()
        self.refuse(status, retry_after)

    def data_received(self, chunk: bytes):
        if self.refused:
            return                   # tornado closes the connection after the answer: the rest is never read
        if len(self.body) + len(chunk) > MAX_NOTEBOOK_BYTES:
            return self._stop(413)
        if self.service.buffered + len(chunk) > self.service.budget:
            return self._stop(503, self.service.retry_after())
        self.service.buffered += len(chunk)
        self.held += len(chunk)
        self.body += chunk

    def _release(self) -> None:
        self.service.buffered -= getattr(self, "held", 0)
        self.held = 0

    def _leave(self) -> None:
        """The student's request is over (answered, refused or abandoned): they may send another."""
        if getattr(self, "mine", False) and not self.judging:
            self.service.under_way.discard(self.student)
            self.mine = False

    def on_finish(self):
        self._release()
        self._leave()

    def on_connection_close(self):
        self._release()
        self._leave()           # unless it is being judged: then when its judging ends (post's finally)
        # the body goes with the connection, and tornado's own close ends the handler's wait for the rest of it:
        # without it the handler waited forever, holding what had come (an upload abandoned at 63 MiB held 63
        # MiB no budget counted, again and again: tests/test_attack_serve3.py)
        self.body = bytearray()
        super().on_connection_close()

    async def post(self, assignment: str):
        if self.pending:
            return self.refuse(*self.pending)
        s, student = self.service, self.student
        if s.busy():                 # before the bucket: a check the service cannot take costs the student nothing
            return self.refuse(503, s.retry_after())
        rules = s.configs[assignment].check_service
        taken = limits.take(s.store, student, assignment, rules)
        if not taken.allowed:
            return self.refuse(429, taken.retry_after, checks_left=0)
        s.admitted += 1
        self.judging = True
        try:                        # the copy too: a MemoryError there must still let go of the queue place and turn
            body, self.body = bytes(self.body), bytearray()
            shown, judged = await asyncio.get_running_loop().run_in_executor(s.pool, s.check, student, assignment,
                                                                             body)
        except KitFault as e:       # the machine's fault, before any submission code ran: the check is given back
            log.error("check of %s by %s failed: %s", assignment, student, e)
            limits.give_back(s.store, student, assignment)
            return self.refuse(500)
        except Exception as e:  # noqa: BLE001 - anything else may be a submission steering a judge bug: given
            # back, it would be a free oracle without limit, so it counts like any check (an instructor can grant)
            log.error("check of %s by %s failed: %r", assignment, student, e)
            return self.refuse(500, error=SAY_COUNTED)
        finally:
            s.admitted -= 1
            self.judging = False
            self._leave()       # judged: the student may send the next (also when they left meanwhile)
        self.set_header("Server-Timing", f"judge;dur={judged * 1000:.0f}")     # the floor, for bench/check_latency.py
        shown["checks_left"] = taken.left
        if taken.retry_after is not None:
            shown["retry_after"] = taken.retry_after
        self.finish(json.dumps(shown))


class CappedServer(tornado.httpserver.HTTPServer):
    """Tornado's server, holding at most half the process's open-file limit as connections: past it a new one is
    closed as soon as it is accepted. Without it, a flood of idle connections (any user of the machine can open
    thousands) leaves accept() failing with EMFILE, which tornado's accept handler raises into the event loop on
    every turn (one logged traceback a turn, a core busy) while it lasts; with it, the other half stays for the
    judge's pipes and files, and the port answers again as soon as the flood lets go."""
    connections = 0

    def handle_stream(self, stream, address):
        if self.connections >= resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2:
            stream.close()
            return
        self.connections += 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn):
        self.connections -= 1
        super().on_close(server_conn)


def make_app(service: Service, prefix: str = "/") -> tornado.web.Application:
    """The routes under ``prefix`` (a hub proxies a service's whole path: /services/<name>/...)."""
    prefix = "/" + prefix.strip("/") + "/" if prefix.strip("/") else "/"
    return tornado.web.Application([(prefix, Health, {"service": service}),
                                    (prefix + API.lstrip("/"), Check, {"service": service})])


def serve(store: Store, port: int, bind: str = "127.0.0.1", workers: int = 2, queue: int = 16, assignments=None,
          log=print, hub: bool = False) -> int:
    """Run the service until SIGINT or SIGTERM."""
    import signal
    # tornado's access log, one line a request (status, path, address, time); the token is a header, never logged
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    prefix = "/"
    if hub:                             # JupyterHub mode: address, prefix and the hub's API from the hub's environment
        from attnkit.serve.hub import HubIdentity, listen_address
        bind, port, prefix = listen_address()
    service = Service(store, workers, queue, assignments, hub=HubIdentity() if hub else None)
    # the port is taken before the warm-up (30-90 s): were it free meanwhile, another user of the machine could
    # listen on it behind the hub's route and collect the tokens students' check cells send; connections wait
    # in the socket's backlog until the service answers
    sockets = tornado.netutil.bind_sockets(port, address=bind)
    service.warm(log)
    server = CappedServer(
        make_app(service, prefix),
        # tornado's own cap, above ours: a body it would refuse it drops without an answer, ours gets a 413
        max_body_size=MAX_NOTEBOOK_BYTES + 2**20, body_timeout=120, idle_connection_timeout=120)

    async def main():
        server.add_sockets(sockets)
        log(f"attnkit serve: checking {', '.join(sorted(service.configs))} on http://{bind}:{port}{prefix} "
            f"({service.workers} at a time, {service.queue} admitted at most)")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.stop()

    try:
        asyncio.run(main())
    finally:
        service.close()
    return 0
