"""`attnkit data fetch`: each corpus a manifest names, downloaded from its public origin and verified.

A manifest's ``[data.origin]`` says where its corpus comes from (data/SOURCES.md tells the story):
  - ``url_constant``, ``size``: the released helper's own address of the published file, fetched as it is, and its
    size in bytes (no more is read);
  - ``url``, ``bytes``, ``sha256``, ``derive``: the first ``bytes`` of that file (one HTTP range request), checked
    against ``sha256``, then turned into the corpus by the derivation named (``DERIVATIONS``).
The corpus itself must then hash to the helper's pinned SHA-256. A corpus already in the data directory is only
verified. Nothing is written until every check passed, and then at once (atomic.write_atomic): a failure never
leaves a partial or unverified file under the corpus's name. Every failure is one sentence saying what to do, and
one run says it for every corpus that failed (it goes on to the next).

A download is bounded (attnkit/bounded_download.py): at most the pinned size (or the range), streamed to an
anonymous temporary file, within ``ATTNKIT_DATA_DEADLINE`` seconds in all (default ``DEADLINE``).

``ATTNKIT_DATA_MIRROR=BASE`` (one setting, for every origin) fetches each origin's path from BASE instead of its
host, e.g. BASE/karpathy/char-rnn/master/...: a campus mirror, or the local server of tests/test_data_fetch.py.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from attnkit.atomic import write_atomic
from attnkit.bounded_download import TooLarge, TooSlow, Unreachable, download
from attnkit.engine import config, datasets, registry

MIRROR_ENV = "ATTNKIT_DATA_MIRROR"
DEADLINE_ENV = "ATTNKIT_DATA_DEADLINE"
# Seconds one file may take in all (connection, redirects, body): the largest download is 2 MiB, about 3 min even
# at 100 kbit/s; a slow link can raise it. A hostile mirror that drips bytes is stopped by this, not by the
# per-read timeout (bounded_download.TIMEOUT), which each byte resets.
DEADLINE = 300.0


@dataclass(frozen=True)
class Origin:
    name: str                      # the corpus's file name
    sha256: str                    # the corpus's pinned digest (the helper's)
    url: str                       # the public address
    size: int | None               # the published file's size in bytes: no more is ever read
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
            if not isinstance(spec.get("size"), int) or spec["size"] <= 0:
                raise datasets.CorpusProblem(f"autograder/{a}/manifest.toml's [data.origin] does not give the size of "
                                            f"{name}: add size = (its size in bytes, pinned like its SHA-256, so a "
                                            f"mirror cannot send more)")
            found[name] = Origin(name, sha, consts[spec["url_constant"]], spec["size"])
        else:                   # the range asked for is the cap: its first `bytes`
            options = tuple((k.removesuffix("_constant"), consts[v]) for k, v in sorted(spec.items())
                            if k.endswith("_constant"))
            found[name] = Origin(name, sha, spec["url"], None, int(spec["bytes"]), spec["sha256"], spec["derive"],
                                 options)
    return list(found.values())


def mirrored(url: str) -> str:
    """``url`` with its scheme and host replaced by $ATTNKIT_DATA_MIRROR (its path kept), when that is set."""
    base = os.environ.get(MIRROR_ENV)
    return base.rstrip("/") + urllib.parse.urlsplit(url).path if base else url


def deadline() -> float:
    """Seconds one file's download may take in all: $ATTNKIT_DATA_DEADLINE, else DEADLINE."""
    text = os.environ.get(DEADLINE_ENV, "").strip()
    if not text:
        return DEADLINE
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0
    if not 0 < seconds < float("inf"):
        raise datasets.CorpusProblem(f"{DEADLINE_ENV} is {text!r}, not a number of seconds: set it to how long one "
                                    f"file may take to download (default {DEADLINE:g}), or unset it")
    return seconds


def _elsewhere(dest: Path) -> str:
    return (f"put a copy obtained another way (data/SOURCES.md says what it is) at {dest}, and `attnkit data fetch` "
            f"will verify it")


def obtain(origin: Origin, dest: Path, seconds: float | None = None) -> bytes:
    """The verified corpus, downloaded (and derived) from ``origin`` within ``seconds`` (default: deadline());
    else CorpusProblem, one sentence."""
    url = mirrored(origin.url)
    what = f"the first {origin.limit:,} bytes of {url}" if origin.limit else url
    seconds = deadline() if seconds is None else seconds
    # An anonymous file in the system's temporary folder: never the whole body in memory, and nothing left in the
    # data directory (or anywhere) whatever happens, even a kill.
    with tempfile.TemporaryFile() as tmp:
        try:
            digest = download(url, tmp, cap=origin.size or origin.limit, seconds=seconds, limit=origin.limit)
        except TooLarge as e:
            raise datasets.CorpusProblem(
                f"{origin.name} from {url} is longer than its pinned {origin.size:,} bytes ({e}), so that server "
                f"does not serve the published file and nothing was written: point {MIRROR_ENV} at a mirror that "
                f"does (or unset it) and run `attnkit data fetch` again, or {_elsewhere(dest)}") from None
        except TooSlow as e:
            raise datasets.CorpusProblem(
                f"{origin.name} was still arriving from {url} after {seconds:g} s ({DEADLINE_ENV}), so nothing was "
                f"written: check that server and the connection (or set {MIRROR_ENV} to another mirror, or raise "
                f"{DEADLINE_ENV} for a slow link) and run `attnkit data fetch` again, or {_elsewhere(dest)}") from None
        except Unreachable as e:
            part = f"the first {origin.limit:,} bytes: " if origin.limit else ""
            raise datasets.CorpusProblem(
                f"{origin.name} could not be downloaded from {url} ({part}{e}); check the connection (or set "
                f"{MIRROR_ENV} to a mirror) and run `attnkit data fetch` again, or {_elsewhere(dest)}") from None
        tmp.seek(0)
        raw = tmp.read()            # at most the cap: the pinned size, or the range for a derived corpus
    if origin.source_sha256:
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


class CorpusProblems(datasets.CorpusProblem):
    """Every corpus that could not be made ready in one run, each with its own sentence (``problems``)."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def fetch(directory: Path, assignments=None, root: Path | None = None, log=print) -> None:
    """Make ``directory`` hold every corpus the assignments need, verified. Each corpus is tried, whatever became of
    the others, so one run names every one missing or wrong: CorpusProblems at the end when any could not be."""
    root = registry.course() if root is None else Path(root)
    directory = Path(directory)
    seconds, problems = deadline(), []
    for origin in origins(assignments, root):
        try:
            _one(origin, directory, seconds, log)
        except datasets.CorpusProblem as e:
            problems.append(str(e))
    if problems:
        raise CorpusProblems(problems)


def _one(origin: Origin, directory: Path, seconds: float, log) -> None:
    dest = directory / origin.name
    if dest.exists():
        datasets.verified(origin.name, origin.sha256, directory)     # a wrong copy is refused, never replaced
        log(f"{origin.name}: verified in {directory}")
        return
    data = obtain(origin, dest, seconds)
    try:
        write_atomic(dest, data)
    except OSError as e:
        raise datasets.CorpusProblem(f"{dest} could not be written ({e.strerror or e}): give --data-dir (or "
                                    f"ATTNKIT_DATA_DIR) a folder you can write to") from None
    log(f"{origin.name}: downloaded from {mirrored(origin.url)}, verified, written to {dest}")
