"""`attnkit data fetch`: each corpus a manifest names, downloaded from its public origin and verified.

A manifest's ``[data.origin]`` says where its corpus comes from (data/SOURCES.md tells the story):
  - ``url_constant``: the released helper's own address of the published file, fetched as it is;
  - ``url``, ``bytes``, ``sha256``, ``derive``: the first ``bytes`` of that file (one HTTP range request), checked
    against ``sha256``, then turned into the corpus by the derivation named (``DERIVATIONS``).
The corpus itself must then hash to the helper's pinned SHA-256. A corpus already in the data directory is only
verified. Nothing is written until every check passed, and then at once (atomic.write_atomic): a failure never
leaves a partial or unverified file under the corpus's name. Every failure is one sentence saying what to do.

``ATTNKIT_DATA_MIRROR=BASE`` (one setting, for every origin) fetches each origin's path from BASE instead of its
host, e.g. BASE/karpathy/char-rnn/master/...: a campus mirror, or the local server of tests/test_data_fetch.py.
"""
from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from attnkit.engine import datasets
from attnkit.atomic import write_atomic
from attnkit.engine import config, registry

MIRROR_ENV = "ATTNKIT_DATA_MIRROR"
TIMEOUT = 30                       # seconds without a byte before a host counts as unreachable
CHUNK = 1 << 16


@dataclass(frozen=True)
class Origin:
    name: str                      # the corpus's file name
    sha256: str                    # the corpus's pinned digest (the helper's)
    url: str                       # the public address
    limit: int | None = None       # fetch only these first bytes (a range request)
    source_sha256: str | None = None
    derive: str | None = None
    options: tuple = ()            # the derivation's arguments, (name, value) pairs


def first_stories(raw: bytes, separator: str, count: int) -> bytes:
    """The first ``count`` stories of a byte range of a file of stories separated by ``separator``: the last part
    is cut by the range and dropped, each story is stripped, and each is followed by a line holding the separator."""
    # The range may end inside a UTF-8 sequence: that is in the dropped part, so it may decode to anything.
    parts = raw.decode("utf-8", errors="replace").split(separator)[:-1]
    stories = [p.strip() for p in parts][:count]
    if len(stories) < count:
        raise ValueError(f"{len(stories)} complete stories, not {count}")
    return "".join(f"{s}\n{separator}\n" for s in stories).encode("utf-8")


DERIVATIONS = {"first_stories": lambda raw, o: first_stories(raw, o["separator"], o["count"])}


def origins(assignments=None, root: Path | None = None) -> list[Origin]:
    """The origin of each corpus the assignments' manifests name, once per file name."""
    root = registry.course() if root is None else Path(root)
    found = {}
    for a in assignments or registry.names():
        data = config.load(a).data
        if not data:
            continue
        consts, spec = datasets.helper_constants(a, root), data.get("origin")
        name, sha = consts[data["file_constant"]], consts[data["sha256_constant"]]
        if not spec:
            raise datasets.CorpusProblem(f"autograder/{a}/manifest.toml names {name} but not where it comes from: "
                                        f"add a [data.origin] (see the other manifests)")
        if "url_constant" in spec:
            found[name] = Origin(name, sha, consts[spec["url_constant"]])
        else:
            options = tuple((k.removesuffix("_constant"), consts[v]) for k, v in sorted(spec.items())
                            if k.endswith("_constant"))
            found[name] = Origin(name, sha, spec["url"], int(spec["bytes"]), spec["sha256"], spec["derive"], options)
    return list(found.values())


def mirrored(url: str) -> str:
    """``url`` with its scheme and host replaced by $ATTNKIT_DATA_MIRROR (its path kept), when that is set."""
    base = os.environ.get(MIRROR_ENV)
    return base.rstrip("/") + urllib.parse.urlsplit(url).path if base else url


class Unreachable(OSError):
    """The origin did not answer with the bytes asked for."""


def download(url: str, limit: int | None = None) -> bytes:
    """The bytes at ``url`` (redirects followed), or only its first ``limit``: a range request, answered by a 206
    for exactly that range, or by a 200 for the whole file, of which only the first ``limit`` bytes are read."""
    headers = {"User-Agent": "attnkit-data-fetch"}
    if limit:
        headers["Range"] = f"bytes=0-{limit - 1}"          # urllib keeps it across redirects
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as r:
            if limit and r.status == 206:
                want = re.fullmatch(rf"bytes 0-{limit - 1}/(\d+|\*)", r.headers.get("Content-Range", "").strip())
                if not want:
                    raise Unreachable(f"it answered the range 0-{limit - 1} with Content-Range "
                                      f"{r.headers.get('Content-Range')!r}")
            elif r.status != 200:
                raise Unreachable(f"HTTP {r.status}")
            body = bytearray()
            while not limit or len(body) < limit:          # a 200 to a range request: stop at the range's end
                chunk = r.read(min(CHUNK, limit - len(body)) if limit else CHUNK)
                if not chunk:
                    break
                body += chunk
    except urllib.error.HTTPError as e:
        raise Unreachable(f"HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise Unreachable(str(e.reason)) from None
    except (OSError, ValueError) as e:                      # a reset, a timeout, a body cut short (IncompleteRead)
        raise Unreachable(f"{type(e).__name__}: {e}") from None
    if limit and len(body) < limit:
        raise Unreachable(f"the answer ended after {len(body):,} of {limit:,} bytes")
    return bytes(body)


def _elsewhere(dest: Path) -> str:
    return (f"put a copy obtained another way (data/SOURCES.md says what it is) at {dest}, and `attnkit data fetch` "
            f"will verify it")


def obtain(origin: Origin, dest: Path) -> bytes:
    """The verified corpus, downloaded (and derived) from ``origin``; else CorpusProblem, one sentence."""
    url = mirrored(origin.url)
    what = f"the first {origin.limit:,} bytes of {url}" if origin.limit else url
    try:
        raw = download(url, origin.limit)
    except Unreachable as e:
        part = f"the first {origin.limit:,} bytes: " if origin.limit else ""
        raise datasets.CorpusProblem(
            f"{origin.name} could not be downloaded from {url} ({part}{e}); check the connection (or set "
            f"{MIRROR_ENV} to a mirror) and run `attnkit data fetch` again, or {_elsewhere(dest)}") from None
    if origin.source_sha256:
        digest = hashlib.sha256(raw).hexdigest()
        if digest != origin.source_sha256:
            raise datasets.CorpusProblem(
                f"{what} have SHA-256 {digest[:16]}, not {origin.source_sha256[:16]} as the sample {origin.name} is "
                f"derived from (the published file may have changed), so nothing was written: {_elsewhere(dest)}")
        raw = DERIVATIONS[origin.derive](raw, dict(origin.options))
    digest = hashlib.sha256(raw).hexdigest()
    if digest != origin.sha256:
        raise datasets.CorpusProblem(
            f"{origin.name} as obtained from {url} has SHA-256 {digest[:16]}, not the pinned "
            f"{origin.sha256[:16]}, so nothing was written: {_elsewhere(dest)}")
    return raw


def fetch(directory: Path, assignments=None, root: Path | None = None, log=print) -> None:
    """Make ``directory`` hold every corpus the assignments need, verified; CorpusProblem at the first that cannot."""
    root = registry.course() if root is None else Path(root)
    directory = Path(directory)
    for origin in origins(assignments, root):
        dest = directory / origin.name
        if dest.exists():
            datasets.verified(origin.name, origin.sha256, directory)     # a wrong copy is refused, never replaced
            log(f"{origin.name}: verified in {directory}")
            continue
        data = obtain(origin, dest)
        try:
            write_atomic(dest, data)
        except OSError as e:
            raise datasets.CorpusProblem(f"{dest} could not be written ({e.strerror or e}): give --data-dir (or "
                                        f"ATTNKIT_DATA_DIR) a folder you can write to") from None
        log(f"{origin.name}: downloaded from {mirrored(origin.url)}, verified, written to {dest}")
