"""A local stand-in for the corpora's public origins (this machine reaches no other host), for the data tests.

It serves, under each mode's prefix, the origins' paths (char-rnn's Tiny Shakespeare, TinyStories-train.txt) from
the copies in the shared data directory; TinyStories-train.txt is longer than the range asked for, as the real
file is. Modes, as the first path segment:
  ok        Range honoured: 206 with Content-Range
  norange   Range ignored: 200 and the whole, longer, file
  redirect  302 to the same path under ok (as the dataset host redirects to its storage)
  wrong     206, but one byte of the range changed
  die       206 with the full Content-Length, then the connection closed after half the body
ATTNKIT_DATA_MIRROR=<server.url>/<mode> points `attnkit data fetch` at a mode.
"""
from __future__ import annotations

import http.server
import os
import re
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

SHAKESPEARE_PATH = "/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
STORIES_PATH = "/datasets/roneneldan/TinyStories/resolve/main/TinyStories-train.txt"
# What follows the first 2 MiB in the stand-in file: a server that ignores the range sends it too.
TAIL = "\n<|endoftext|>\nOnce upon a time, the stand-in file went on past the range.\n".encode() * 2000


# The TinyStories source sample: the first 2 MiB of TinyStories-train.txt, the bytes `attnkit data fetch` asks the
# dataset for (and keeps only the 2,000 stories derived from). The stand-in must serve those exact bytes (the fetch
# checks their SHA-256), so no small fixture can stand for it; at 2 MiB it is data, not committed (data/SOURCES.md,
# "For the tests", says how to get it).
SOURCE_SAMPLE = "TinyStories-train.first-2MiB.txt"
SHARED = Path(os.environ.get("ATTNKIT_DATA_DIR") or "/nonexistent")
# Skipped on a developer machine without it, saying what is missing and how to get it; under CI (CI set) never
# skipped: the tests run and fail on the missing file.
needs_source_sample = pytest.mark.skipif(
    not os.environ.get("CI") and not (SHARED / SOURCE_SAMPLE).is_file(),
    reason=f"ATTNKIT_DATA_DIR ({SHARED}) has no {SOURCE_SAMPLE}, the TinyStories source sample the local stand-in "
           f"origin serves: the first 2 MiB of the dataset's TinyStories-train.txt (SHA-256 5352b299...); "
           f"data/SOURCES.md, 'For the tests', says how to get it")


def files(shared: Path) -> dict[str, bytes]:
    return {SHAKESPEARE_PATH: (shared / "tinyshakespeare.txt").read_bytes(),
            STORIES_PATH: (shared / SOURCE_SAMPLE).read_bytes() + TAIL}


class Server:
    def __init__(self, content: dict[str, bytes]):
        self.requests = []                       # (mode, path, Range header) of every request answered
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                mode, _, path = urllib.parse.urlsplit(self.path).path.lstrip("/").partition("/")
                path = "/" + path
                outer.requests.append((mode, path, self.headers.get("Range")))
                body = content.get(path)
                if body is None:
                    return self.send_error(404)
                if mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", f"/ok{path}")
                    self.send_header("Content-Length", "0")
                    return self.end_headers()
                asked = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
                if mode == "norange" or not asked:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    return self.wfile.write(body)
                first, last = int(asked[1]), min(int(asked[2]), len(body) - 1)
                part = body[first:last + 1]
                if mode == "wrong":
                    part = part[:100] + bytes([part[100] ^ 1]) + part[101:]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(body)}")
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                if mode == "die":
                    self.wfile.write(part[:len(part) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(part)

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                # a client that stops reading at 2 MiB, or refuses a body, closes the connection: that is the
                # behaviour under test, not an error to print
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
