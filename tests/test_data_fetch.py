"""`attnkit data fetch` against a local stand-in for the corpora's origins (tests/origin_server.py): the range
request, the redirect, a server that ignores the range, the derivation of stories.txt, wrong bytes refused, a body
cut short, an unreachable host: never a partial file, every failure one sentence naming what to do."""
import hashlib
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests import KIT_ROOT
from attnkit import datafetch
from attnkit.bounded_download import Unreachable, download as download_to
from attnkit.engine.datasets import CorpusProblem, every_needed
from attnkit.course import BIN
from tests.origin_server import SHARED, SOURCE_SAMPLE, STORIES_PATH, Server, files, needs_source_sample

pytestmark = needs_source_sample     # the shared TinyStories source sample (tests/origin_server.py)
PINNED = every_needed()                 # {file name: SHA-256}, from the helpers the manifests name


@pytest.fixture(scope="module")
def server():
    with Server(files(SHARED)) as s:
        yield s


def run_fetch(tmp_path, mirror, *args):
    """The installed command, as `make demo` runs it; the data directory is a fresh folder of tmp_path."""
    data = tmp_path / "data"
    env = dict(os.environ, ATTNKIT_DATA_DIR=str(data), ATTNKIT_DATA_MIRROR=mirror)
    p = subprocess.run([str(BIN / "attnkit"), "data", "fetch", *args], env=env, capture_output=True, text=True,
                       timeout=300)
    return p, data


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_one_sentence(stderr: str, data: Path, name: str):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnkit data fetch: "), stderr
    assert "Traceback" not in stderr and str(data / name) in lines[0], stderr
    # the sentence ends once: no full stop followed by another sentence
    assert ". " not in lines[0].replace("e.g. ", "") and not lines[0].endswith("."), lines[0]


@pytest.mark.parametrize("mode", ["ok", "redirect", "norange"])
def test_every_corpus_is_fetched_verified_and_written(tmp_path, server, mode):
    del server.requests[:]
    p, data = run_fetch(tmp_path, f"{server.url}/{mode}")
    assert p.returncode == 0, p.stderr
    assert {f.name: digest(f) for f in data.iterdir()} == PINNED          # no temporary file left beside them
    ranges = [r for m, path, r in server.requests if path == STORIES_PATH]
    assert ranges and all(r == "bytes=0-2097151" for r in ranges), server.requests   # the range, kept on redirect
    if mode == "redirect":
        assert [m for m, path, _ in server.requests if path == STORIES_PATH] == ["redirect", "ok"]
    again, _ = run_fetch(tmp_path, "http://127.0.0.1:9/unused")          # there and verified: nothing fetched
    assert again.returncode == 0 and again.stdout.count("verified in") == len(PINNED), again


def test_the_derivation_makes_stories_txt_from_the_source_sample():
    raw = (SHARED / SOURCE_SAMPLE).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == "5352b299dcb1a32898b2d779b145b5a05f3e1265953fd21c264c9f9f9c9ae33d"
    made = datafetch.first_stories(raw, "<|endoftext|>", 2000)
    assert made == (SHARED / "stories.txt").read_bytes()
    assert hashlib.sha256(made).hexdigest() == PINNED["stories.txt"]
    with pytest.raises(ValueError, match="complete stories"):
        datafetch.first_stories(raw[:10_000], "<|endoftext|>", 2000)


@pytest.mark.parametrize("mode, said", [("wrong", "nothing was written"), ("die", "could not be downloaded")])
def test_bad_bytes_are_refused_and_nothing_is_kept(tmp_path, server, mode, said):
    p, data = run_fetch(tmp_path, f"{server.url}/{mode}", "attention_lm")
    assert p.returncode == 2 and said in p.stderr, p.stderr
    assert_one_sentence(p.stderr, data, "stories.txt")
    assert not data.exists() or list(data.iterdir()) == []              # no partial, no temporary file


def test_an_unreachable_host_says_what_to_do(tmp_path):
    with socket.socket() as s:                          # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        p, data = run_fetch(tmp_path, f"http://127.0.0.1:{s.getsockname()[1]}")
    assert p.returncode == 2 and "could not be downloaded" in p.stderr, p.stderr
    assert "ATTNKIT_DATA_MIRROR" in p.stderr and "put a copy obtained another way" in p.stderr
    lines = p.stderr.strip().splitlines()                 # every corpus named in one run, one sentence each
    assert len(lines) == len(PINNED), p.stderr
    for name in PINNED:
        assert_one_sentence(next(line for line in lines if f"/{name}," in line), data, name)


def test_a_wrong_copy_already_there_is_refused_not_replaced(tmp_path, server):
    data = tmp_path / "data"
    data.mkdir()
    (data / "tinyshakespeare.txt").write_text("not shakespeare")
    p, _ = run_fetch(tmp_path, f"{server.url}/ok", "causal_head")
    assert p.returncode == 2 and "attnkit data fetch" in p.stderr, p.stderr
    assert_one_sentence(p.stderr, data, "tinyshakespeare.txt")
    assert (data / "tinyshakespeare.txt").read_text() == "not shakespeare"


def test_range_answers_are_checked(tmp_path, monkeypatch, server):
    """A 206 for another range is refused; the mirror replaces the host and keeps the path."""
    monkeypatch.setenv(datafetch.MIRROR_ENV, f"{server.url}/ok/")
    assert datafetch.mirrored("https://huggingface.co" + STORIES_PATH) == f"{server.url}/ok{STORIES_PATH}"
    def download(limit):
        with open(tmp_path / "part", "w+b") as out:
            download_to(f"{server.url}/ok{STORIES_PATH}", out, cap=limit, seconds=60, limit=limit)
            return out.tell()
    assert download(1000) == 1000
    with pytest.raises(Unreachable, match="Content-Range"):
        download(10 ** 9)                                                 # the server answers a shorter range
    with pytest.raises(CorpusProblem, match="could not be downloaded"):
        datafetch.obtain(datafetch.Origin("x.txt", "0" * 64, f"{server.url}/ok/missing", 100), tmp_path / "x.txt")


def test_release_and_demo_take_a_data_dir(tmp_path):
    """--data-dir, which the messages name, exists: an empty one stops each with the data sentence."""
    for command in (["release", "--no-solutions"], ["demo", "--into", str(tmp_path / "course")]):
        p = subprocess.run([str(BIN / "attnkit"), *command, "--data-dir", str(tmp_path / "empty")],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 2, (command, p.stderr)
        assert "attnkit data fetch" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not (tmp_path / "course").exists()


def test_sources_md_gives_every_origin_and_digest():
    text = (KIT_ROOT / "data" / "SOURCES.md").read_text()
    for origin in datafetch.origins():
        assert origin.name in text and origin.url in text and origin.sha256 in text, origin
        assert origin.source_sha256 is None or origin.source_sha256 in text, origin
        assert origin.size is None or f"Size: {origin.size:,} bytes" in text, origin    # the pinned size, once
        assert origin.size or origin.limit, origin                       # every download has a cap
