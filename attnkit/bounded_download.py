"""One HTTP(S) download a hostile server cannot stretch: a byte cap, an overall deadline, http(s) redirects only.

`attnkit data fetch` trusts nothing but the pinned digests, so a mirror (``ATTNKIT_DATA_MIRROR``) or an origin may
be hostile or broken. Without bounds it could send an endless body (read into memory: gigabytes in seconds) or
drip one byte every few seconds (the socket's timeout is per read, so it never fires). Here:
  - the body goes to a file the caller gives (an anonymous temporary file), never into memory, hashed on the way;
  - at most ``cap`` bytes are read: a body announced or found longer is refused at once;
  - one deadline covers the whole download (connection, TLS, headers, redirects, body): when it passes, a timer
    shuts every socket of the download down, which wakes any read blocked on it;
  - a redirect may go to http or https only (urllib alone would also follow ftp; file:// it already refuses).
"""
from __future__ import annotations

import hashlib
import http.client
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 30                       # seconds without a byte before a host counts as unreachable
CHUNK = 1 << 16


class Unreachable(OSError):
    """The origin did not answer with the bytes asked for."""


class TooLarge(Unreachable):
    """The body is longer than the cap."""


class TooSlow(Unreachable):
    """The deadline passed before the body was complete."""


class _Deadline:
    """Shuts down every socket it watches once ``seconds`` have passed (from a timer thread)."""

    def __init__(self, seconds: float):
        self.seconds, self.passed = seconds, False
        self._lock, self._socks = threading.Lock(), []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket) -> socket.socket:
        # A duplicate of the descriptor: shutdown acts on the connection, so it reaches the socket even after
        # ssl's wrap_socket has detached the original object.
        dup = sock.dup()
        with self._lock:
            self._socks.append(dup)
            if self.passed:
                _shut(dup)
        return sock

    def _expire(self):
        with self._lock:
            self.passed = True
            for s in self._socks:
                _shut(s)

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        with self._lock:
            for s in self._socks:
                s.close()


def _shut(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:                # already closed by its side: nothing left to wake
        pass


def _watched(cls, deadline: _Deadline):
    """A connection class for urllib's do_open whose sockets the deadline watches from their creation."""
    def make(host, **kw):
        conn = cls(host, **kw)
        create = conn._create_connection      # http.client's hook for making the TCP socket (3.4 and later)
        conn._create_connection = lambda *a, **k: deadline.watch(create(*a, **k))
        return conn
    return make


class _Http(urllib.request.HTTPHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.deadline), req)


class _Https(urllib.request.HTTPSHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.deadline), req, context=self._context)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http and https only, checked before urllib's own check (which lets ftp through)."""

    def http_error_302(self, req, fp, code, msg, headers):
        where = headers.get("location") or headers.get("uri")
        if where and urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, where)).scheme not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, f"a redirect to {where} (only http and https are "
                                         f"followed)", headers, fp)
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def download(url: str, out, *, cap: int, seconds: float, limit: int | None = None) -> str:
    """Write the body at ``url`` (redirects followed) to the binary file ``out`` and return its SHA-256; with
    ``limit``, only its first ``limit`` bytes: a range request, answered by a 206 for exactly that range, or by a
    200 for the whole file, of which only the first ``limit`` are read. A body longer than ``cap`` (without
    ``limit``) is TooLarge; a download not done within ``seconds`` is TooSlow; any other failure Unreachable."""
    headers = {"User-Agent": "attnkit-data-fetch"}
    if limit:
        headers["Range"] = f"bytes=0-{limit - 1}"          # urllib keeps it across redirects
    want = limit or cap + 1                                   # one byte past the cap is enough to refuse
    digest, got = hashlib.sha256(), 0
    with _Deadline(seconds) as deadline:
        opener = urllib.request.build_opener(_Http(deadline), _Https(deadline), _Redirects())
        try:
            with opener.open(urllib.request.Request(url, headers=headers), timeout=min(TIMEOUT, seconds)) as r:
                _check_status(r, limit)
                length = r.headers.get("Content-Length", "")
                if not limit and length.isdigit() and int(length) > cap:
                    raise TooLarge(f"it announced {int(length):,} bytes")
                while got < want:
                    chunk = r.read1(min(CHUNK, want - got))
                    if not chunk:
                        break
                    got += len(chunk)
                    digest.update(chunk)
                    out.write(chunk)
                    if deadline.passed:
                        break
        except Unreachable:
            raise
        except urllib.error.HTTPError as e:
            raise Unreachable(f"HTTP {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            raise (_late(deadline) or Unreachable(str(e.reason))) from None
        except (OSError, ValueError, http.client.HTTPException) as e:   # a reset, a timeout, a body cut short
            raise (_late(deadline) or Unreachable(f"{type(e).__name__}: {e}")) from None
        if deadline.passed:
            raise _late(deadline)
    if not limit and got > cap:
        raise TooLarge(f"it sent more than {cap:,} bytes")
    if limit and got < limit:
        raise Unreachable(f"the answer ended after {got:,} of {limit:,} bytes")
    return digest.hexdigest()


def _late(deadline: _Deadline) -> TooSlow | None:
    return TooSlow(f"it was not done after {deadline.seconds:g} s") if deadline.passed else None


def _check_status(r, limit):
    if limit and r.status == 206:
        if not re.fullmatch(rf"bytes 0-{limit - 1}/(\d+|\*)", r.headers.get("Content-Range", "").strip()):
            raise Unreachable(f"it answered the range 0-{limit - 1} with Content-Range "
                              f"{r.headers.get('Content-Range')!r}")
    elif r.status != 200:
        raise Unreachable(f"HTTP {r.status}")
