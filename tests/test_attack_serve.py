"""Attacks on the check service (`attnkit serve`) by a student with a token or a peer on the same machine, each
against a real server on 127.0.0.1 (tests/test_serve.py's), its state in a scratch folder. Each test is an
attack; it passes when the attack fails. Synchronised by polling the health endpoint, never by sleeping.

On the fixture course (tests/fixture_course/): the server serves its example."""
import http.client
import http.server
import json
import resource
import select
import socket
import threading

import pytest

from attnkit.isolation.files import MAX_NOTEBOOK_BYTES
from attnkit.serve import attnkit_check
from tests.fixture_course import MAX_SCORE, NAME as A
from tests.test_serve import Server, _forward, sent, stopped_after, token_for, until  # noqa: F401 - sent: a fixture


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    return tmp_path_factory.mktemp("attack-serve-state")


@pytest.fixture(scope="module")
def one(state, fixture_course_root):
    """One worker, two admitted: the smallest service where one student could take everyone's turn."""
    s = Server(state, workers=1, queue=2, course=fixture_course_root, assignment=A).start()
    with stopped_after(s):
        yield s


def _post_raw(port: int, token: str, length: str, first: bytes = b"") -> socket.socket:
    """A POST whose headers are sent, with ``first`` bytes of its body; the rest is up to the caller."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.sendall(f"POST /api/v1/check/{A} HTTP/1.1\r\nHost: x\r\nAuthorization: token {token}\r\n"
              f"Content-Length: {length}\r\n\r\n".encode("latin-1") + first)
    return s


def _answered(s: socket.socket) -> bool:
    return bool(select.select([s], [], [], 0)[0])


def _status(s: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        got = s.recv(4096)
        assert got, "the connection closed without an answer"
        head += got
    return int(head.split(b" ", 2)[1])


# Breaking the service: a header Python's str.isdigit() accepts that int() does not.

@pytest.mark.parametrize("length", ["\u00b2", "9" * 5000])   # a superscript two (Latin-1); past int()'s 4300 digits
def test_a_content_length_that_is_no_number_is_400_not_500(one, state, length):
    token = token_for(state, "len" + str(len(length)))
    s = _post_raw(one.port, token, length)
    try:
        assert _status(s) == 400
    finally:
        s.close()
    assert one.health()["status"] == "ok"


# Starving the others: one student, many uploads or checks at once.

def test_one_student_cannot_hold_everyones_upload_budget(one, state):
    hog, other = token_for(state, "hog"), token_for(state, "pat")
    body = b" " * (MAX_NOTEBOOK_BYTES - 1)           # all but the last byte: each upload is held, never finished
    held, refused, socks = 0, [], []
    try:
        for _ in range(3):                           # the budget is (queue + workers) = 3 bodies of the cap
            s = _post_raw(one.port, hog, str(MAX_NOTEBOOK_BYTES), body[:4096])
            socks.append(s)
            until(lambda: _answered(s) or one.health()["buffered_bytes"] == held + 4096, "the upload seen")
            if _answered(s):
                refused.append(_status(s))
                continue
            s.sendall(body[4096:])
            held += len(body)
            until(lambda: one.health()["buffered_bytes"] == held, "the upload held")
        status, _, got = one.check(other, b" " * 100 + b"{}")
        assert status == 200, got                    # a classmate's check still goes through
        assert refused == [409, 409] and held == len(body)
    finally:
        for s in socks:
            s.close()
    until(lambda: one.health()["buffered_bytes"] == 0, "the closed uploads let go")
    # the refusals cost the hog nothing, and the held upload that never finished neither
    assert one.check(hog, b"{}")[2]["checks_left"] == 2


def test_one_student_cannot_take_the_queue_with_checks_at_once(one, state, sent):
    hog, other = token_for(state, "hal"), token_for(state, "ivy")
    answers = {}
    first = threading.Thread(target=lambda: answers.setdefault("loop", one.check(hog, sent.hold)))    # held 15 s
    first.start()
    one.wait_admitted(1, first)
    second = threading.Thread(target=lambda: answers.setdefault("again", one.check(hog, sent.release.read_bytes())))
    second.start()
    until(lambda: "again" in answers or one.health()["admitted"] == 2, "the second check answered or admitted")
    status, _, got = one.check(other, sent.solution.read_bytes())       # waits behind the loop, is not refused
    assert status == 200 and got["score"] == MAX_SCORE
    second.join(300)
    first.join(300)
    assert answers["again"][0] == 409 and "under way" in answers["again"][2]["error"]
    assert answers["loop"][0] == 200 and answers["loop"][2]["checks_left"] == 2      # the 409 cost nothing
    assert one.check(hog, b"{}")[2]["checks_left"] == 1                              # and the next is taken


def test_a_notebook_bomb_costs_its_sender_one_check_and_no_one_else_anything(one, state, sent):
    bomber, other = token_for(state, "bo"), token_for(state, "cy")
    bomb = b'{"cells": ' + b"[" * 200_000 + b"]" * 200_000 + b', "metadata": {}, "nbformat": 4}'
    status, _, got = one.check(bomber, bomb)
    assert status == 200 and got["score"] == 0 and got["error"] and got["checks_left"] == 2
    status, _, got = one.check(other, sent.solution.read_bytes())
    assert status == 200 and got["score"] == MAX_SCORE


# Oracles and aliases: another name for the same assignment, or for the same student.

def _escaped(name: str, i: int, hex_format: str = "02X") -> str:
    """``name`` with its ``i``-th character percent-encoded (upper- or lower-case hex digits)."""
    return name[:i] + "%" + format(ord(name[i]), hex_format) + name[i + 1:]


def test_another_spelling_of_the_assignment_is_the_same_bucket_or_404(one, state):
    token = token_for(state, "ned")
    # another case; a NUL, a space, a dot, a path or a parameter added; a Cyrillic homoglyph (U+0435 for "e")
    assert A.lower() == A and "e" in A and any(c.isalpha() for c in A)
    for alias in [A.capitalize(), A.upper(), f"{A}%00", f"{A}%20", f"{A}.", A.replace("e", "%D0%B5", 1),
                  f"{A}%2F..", f"..%2F{A}", f"{A};x", f"%20{A}"]:
        assert alias != A and one.check(token, b"{}", assignment=alias)[0] == 404, alias
    # a percent-encoding of the same name is the same assignment, hence the same bucket: of a character whose
    # code has a hex letter (upper-case, then lower-case), of the first character
    letter = next(i for i, c in enumerate(A) if format(ord(c), "02x") != format(ord(c), "02X"))
    assert [one.check(token, b"{}", assignment=a)[2]["checks_left"] for a in
            [A, _escaped(A, letter), _escaped(A, 0)]] == [2, 1, 0]
    assert one.check(token, b"{}", assignment=_escaped(A, letter, "02x"))[0] == 429


def test_no_variant_of_a_token_is_anyone_elses(one, state):
    token = token_for(state, "oda")
    for bad in [token[:-1], token + "A", token.swapcase(), token.upper(), " ",
                "x" * 300, f"{token} {token}"]:
        assert one.check(bad, b"{}")[0] == 401, bad
    twice = one.request("POST", f"/api/v1/check/{A}", b"{}",
                        {"Authorization": f"token {token}, token {token_for(state, 'oda2')}"})
    assert twice[0] == 401
    status, _, got = one.request("POST", f"/api/v1/check/{A}", b"{}",
                                 {"Authorization": f"TOKEN   {token}\t"})
    assert status == 200                              # the scheme's case and spaces change nothing: still oda's


# Script in what the student is shown.

EVIL = "<img src=x onerror=alert(1)>"


def test_a_hostile_exception_puts_no_markup_in_the_answer(one, state, fixture_course):
    token = token_for(state, "rex")
    evil = _forward(f"raise type({EVIL!r}, (Exception,), {{}})('<script>alert(2)</script>')")
    status, _, got = one.check(token, evil)
    assert status == 200 and got["score"] < MAX_SCORE
    assert "<script>alert(2)" not in json.dumps(got)     # the exception's own text never comes back
    page = got["feedback_html"]
    assert "<img " not in page and "onerror" not in page and "alert(" not in page    # nor as markup
    assert "&lt;img" not in page and "&lt;script" not in page                       # nor as text


class _Squatter(http.server.BaseHTTPRequestHandler):
    """What a peer on the machine answers from the service's port while the service is down (a restart)."""
    seen = []

    def do_POST(self):
        self.seen.append((self.headers.get("Authorization"), self.rfile.read(int(self.headers["Content-Length"]))))
        page = ("<style>body{display:none}</style><script>fetch('/api/contents')</script>"
                f"<p>{EVIL}</p></div></div>")
        body = json.dumps({"assignment": "a", "score": 1.0, "max_score": 20.0, "checks": [],
                           "feedback_html": page, "checks_left": 2}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_client_runs_no_script_and_no_style_of_an_answer(monkeypatch, tmp_path, sent):
    import IPython
    import IPython.display
    squatter = http.server.HTTPServer(("127.0.0.1", 0), _Squatter)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        shown = []
        monkeypatch.setattr(IPython, "get_ipython", lambda: object())
        monkeypatch.setattr(IPython.display, "display", shown.append)
        nb = tmp_path / f"{A}.ipynb"
        nb.write_bytes(sent.release.read_bytes())
        assert attnkit_check.check(A, notebook=nb, url=f"http://127.0.0.1:{squatter.server_port}",
                                   token="t") is None
    finally:
        squatter.shutdown()
        squatter.server_close()
    page = shown[0].data
    # the page is shown in a sandboxed frame of its own (no script, no style leaking into Jupyter, no navigation)
    assert page.startswith('<div><iframe sandbox="" srcdoc="') and page.endswith("></iframe></div>")
    assert page.count("<") == 4 and "<script" not in page and "<style" not in page and "<img" not in page
    assert "&lt;script&gt;" in page                   # escaped into the attribute, which the browser un-escapes


# Breaking the service: more connections than it may hold files. A peer can open thousands; the test lowers the
# service's limit to 256 files instead, and opens 300.

def test_a_flood_of_connections_ends_and_the_service_answers_again(one):
    log = one.state / f"serve-{one.port}.log"
    soft, hard = resource.prlimit(one.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(one.proc.pid, resource.RLIMIT_NOFILE, (256, hard))
    socks = []
    try:
        for _ in range(300):
            socks.append(socket.create_connection(("127.0.0.1", one.port), timeout=120))
        # past its cap the service closes a new connection at once (a bound of 120 s, not a measurement: an
        # accept loop stuck on EMFILE never reaches this connection at all)
        try:
            assert socks[-1].recv(1) == b""
        except ConnectionResetError:
            pass
        for s in socks:
            s.close()
        until(lambda: _health_or_none(one) is not None, "the service answers again")
        assert b"Too many open files" not in log.read_bytes()
    finally:
        for s in socks:
            s.close()
        resource.prlimit(one.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))


def _health_or_none(server):
    try:
        return server.health()
    except (OSError, http.client.HTTPException, AssertionError):
        return None
