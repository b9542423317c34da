"""`attnkit data fetch` against a hostile mirror (ATTNKIT_DATA_MIRROR), served by a local server in this file: an
endless body must not fill memory, a body dripped byte by byte must not hold the run past its deadline, a redirect
may only go to http(s), and one run names every corpus it could not make ready; an honest mirror still works.
Each is run through the installed command, as `make demo` runs it, and measured from outside (os.wait4's rusage)."""
from __future__ import annotations

import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from attnkit.course import BIN
from attnkit.engine.datasets import every_needed
from tests.origin_server import SHAKESPEARE_PATH, SHARED, files, needs_source_sample
from tests.test_data_fetch import assert_one_sentence

pytestmark = needs_source_sample     # the shared TinyStories source sample (tests/origin_server.py)
PINNED = every_needed()
# What the hostile server sends at most: "endless" for the fetch, but bounded, so that code without a cap fails
# this test by its memory instead of taking the machine down.
ENDLESS = 160 << 20
DRIP_EVERY = 0.2                   # seconds between two bytes: each read gets a byte long before any read timeout


class Hostile:
    """Modes, as the first path segment (the mirror is <url>/<mode>):
    ok        the corpora's origins, honestly (range honoured)
    endless   200, no length, bytes until ENDLESS (or the client leaves)
    drip      200 and the true length, then one byte every DRIP_EVERY seconds
    driphead  the status line itself, one byte every DRIP_EVERY seconds
    file, ftp a redirect to file:///etc/passwd, to ftp://127.0.0.1/...
    twobad    Shakespeare with one byte changed; the TinyStories range cut short"""

    def __init__(self, content: dict[str, bytes]):
        stop = self.stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                mode, _, path = urllib.parse.urlsplit(self.path).path.lstrip("/").partition("/")
                path = "/" + path
                body = content.get(path)
                if body is None:
                    return self.send_error(404)
                getattr(self, "mode_" + mode, self.mode_ok)(path, body)

            def mode_ok(self, path, body):
                asked = re.fullmatch(r"bytes=0-(\d+)", self.headers.get("Range") or "")
                part = body[:int(asked[1]) + 1] if asked else body
                self.send_response(206 if asked else 200)
                if asked:
                    self.send_header("Content-Range", f"bytes 0-{len(part) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                self.wfile.write(part)

            def mode_endless(self, path, body):
                self.send_response(200)
                self.end_headers()
                block = b"x" * (1 << 16)
                for _ in range(ENDLESS // len(block)):
                    if stop.is_set():
                        return
                    self.wfile.write(block)

            def mode_drip(self, path, body):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.flush()
                self._drip(body)

            def mode_driphead(self, path, body):
                # a long header: at this pace the head alone takes over 3 min, past any test's patience
                self._drip(b"HTTP/1.0 200 OK\r\nX-Pad: " + b"x" * 1000 + b"\r\nContent-Length: 5\r\n\r\nhello")

            def _drip(self, data):
                for i in range(len(data)):                      # the pace of the attack, not a synchronisation
                    if stop.wait(DRIP_EVERY):
                        return
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()

            def mode_file(self, path, body):
                self._redirect("file:///etc/passwd")

            def mode_ftp(self, path, body):
                self._redirect(f"ftp://127.0.0.1:9{path}")

            def _redirect(self, where):
                self.send_response(302)
                self.send_header("Location", where)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def mode_twobad(self, path, body):
                if path == SHAKESPEARE_PATH:
                    changed = body[:100] + bytes([body[100] ^ 1]) + body[101:]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(changed)))
                    self.end_headers()
                    return self.wfile.write(changed)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes 0-{(2 << 20) - 1}/{len(body)}")
                self.end_headers()
                self.wfile.write(body[:1000])                    # then the connection closes: cut short

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                # the client leaving (the behaviour under test) breaks the pipe: not an error to print
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def server():
    with Hostile(files(SHARED)) as s:
        yield s


class Run:
    def __init__(self, code, stdout, stderr, seconds, peak_mib, data):
        self.code, self.stdout, self.stderr, self.seconds, self.peak_mib, self.data = \
            code, stdout, stderr, seconds, peak_mib, data

    def lines(self):
        return self.stderr.strip().splitlines()


def fetch(tmp_path, mirror, *assignments, deadline=None, timeout=120) -> Run:
    """`attnkit data fetch` into a fresh data directory; its own peak resident memory from os.wait4."""
    data = tmp_path / "data"
    env = dict(os.environ, ATTNKIT_DATA_DIR=str(data), ATTNKIT_DATA_MIRROR=mirror)
    env.pop("ATTNKIT_DATA_DEADLINE", None)
    if deadline is not None:
        env["ATTNKIT_DATA_DEADLINE"] = str(deadline)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    t0 = time.monotonic()
    with open(out, "wb") as o, open(err, "wb") as e:
        p = subprocess.Popen([str(BIN / "attnkit"), "data", "fetch", *assignments], env=env, stdout=o, stderr=e)
    try:
        # wait4 for this child's own rusage; polled so a run that never ends fails the test instead of hanging it
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                p.kill()
                pid, status, usage = os.wait4(p.pid, 0)
                pytest.fail(f"attnkit data fetch still running after {timeout} s: {err.read_text()}")
            time.sleep(0.05)
    finally:
        p.returncode = 0                                 # reaped above: Popen must not wait for it again
    return Run(os.waitstatus_to_exitcode(status), out.read_text(), err.read_text(), time.monotonic() - t0,
               usage.ru_maxrss / 1024, data)


def left_in(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir()) if data.exists() else []


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def honest(tmp_path_factory, server):
    """An honest mirror, fetched with the default deadline: every corpus written and verified."""
    run = fetch(tmp_path_factory.mktemp("honest"), f"{server.url}/ok")
    assert run.code == 0, run.stderr
    assert {f.name: digest(f) for f in run.data.iterdir()} == PINNED, left_in(run.data)
    return run


def test_an_honest_mirror_still_works(honest):
    assert honest.stdout.count("verified, written to") == len(PINNED), honest.stdout


def test_an_endless_body_is_refused_with_bounded_memory(tmp_path, server, honest):
    run = fetch(tmp_path, f"{server.url}/endless", "causal_head")
    assert run.code == 2, run.stderr
    # main's code read the whole body into memory: +110 MiB and more
    print(f"peak resident memory: {run.peak_mib:.0f} MiB, honest run {honest.peak_mib:.0f} MiB")
    assert run.peak_mib < honest.peak_mib + 32, (run.peak_mib, honest.peak_mib)
    assert run.seconds < 30, run.seconds                       # the server would go on for 160 MiB
    [line] = run.lines()
    assert line.startswith("attnkit data fetch: tinyshakespeare.txt from ") and f"{server.url}/endless" in line
    assert "longer than its pinned 1,115,394 bytes" in line and "ATTNKIT_DATA_MIRROR" in line, line
    assert_one_sentence(run.stderr, run.data, "tinyshakespeare.txt")
    assert left_in(run.data) == []


@pytest.mark.parametrize("mode", ["drip", "driphead"])
def test_a_dripping_mirror_meets_the_deadline(tmp_path, server, mode):
    run = fetch(tmp_path, f"{server.url}/{mode}", "causal_head", deadline=2, timeout=60)
    assert run.code == 2, run.stderr
    [line] = run.lines()
    assert "tinyshakespeare.txt was still arriving from" in line and "after 2 s (ATTNKIT_DATA_DEADLINE)" in line, line
    assert run.seconds < 30, run.seconds                       # the deadline, not the drip's end (over 2 days)
    assert_one_sentence(run.stderr, run.data, "tinyshakespeare.txt")
    assert left_in(run.data) == []


@pytest.mark.parametrize("mode, said", [("file", "file:///etc/passwd"), ("ftp", "ftp://127.0.0.1:9")])
def test_a_redirect_leaves_http_only(tmp_path, server, mode, said):
    run = fetch(tmp_path, f"{server.url}/{mode}", "causal_head")
    assert run.code == 2, run.stderr
    [line] = run.lines()
    assert "could not be downloaded" in line and said in line, line
    assert f"a redirect to {said}" in line and "only http and https are followed" in line, line
    assert left_in(run.data) == []


def test_every_bad_corpus_is_named_in_one_run(tmp_path, server):
    run = fetch(tmp_path, f"{server.url}/twobad")
    assert run.code == 2, run.stderr
    lines = run.lines()
    assert len(lines) == 2 and all(line.startswith("attnkit data fetch: ") for line in lines), run.stderr
    shakespeare, = [line for line in lines if "tinyshakespeare.txt" in line]
    stories, = [line for line in lines if "stories.txt" in line]
    assert "tinyshakespeare.txt as obtained from" in shakespeare and "nothing was written" in shakespeare, shakespeare
    assert "stories.txt could not be downloaded" in stories and "ended after 1,000 of" in stories, stories
    assert left_in(run.data) == []


def test_a_bad_deadline_setting_is_one_sentence(tmp_path, server):
    run = fetch(tmp_path, f"{server.url}/ok", deadline="soon")
    assert run.code == 2, run.stderr
    [line] = run.lines()
    assert "ATTNKIT_DATA_DEADLINE is 'soon', not a number of seconds" in line, line
    assert left_in(run.data) == []
