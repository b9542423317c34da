"""Tiny Shakespeare: locate, fetch if absent, and verify before anyone reads it.

The corpus is never committed. It is looked for in, in order:
  1. the directory given explicitly (``--data-dir`` / ``data_dir=``),
  2. the directory in the environment variable ``ATTNKIT_DATA_DIR``,
  3. the directory holding this file: beside the notebook in a student's folder,
     ``data/`` in the course (where ``source/causal_head/corpus.py`` links to),
and downloaded from the canonical char-rnn address into that last directory
(or the explicit one) only when none holds it. Whatever is found must match the
published SHA-256, length and alphabet, so a truncated or edited copy stops the
notebook with a plain message instead of quietly changing every figure. Every
message names only this file, its folder and the address, which exist wherever
it was copied.

Stdlib only: this file is released beside the student notebook.

    python corpus.py [--data-dir DIR]      # prepare: find or fetch, then verify
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.request
from pathlib import Path

FILENAME = "tinyshakespeare.txt"
URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
N_CHARS = 1_115_394
N_SYMBOLS = 65
ENV_VAR = "ATTNKIT_DATA_DIR"
DEFAULT_DIR = Path(__file__).resolve().parent


class CorpusError(RuntimeError):
    """The corpus is missing or is not the published file."""


def candidate_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    dirs = []
    if data_dir:
        dirs.append(Path(data_dir))
    if os.environ.get(ENV_VAR):
        dirs.append(Path(os.environ[ENV_VAR]))
    dirs.append(DEFAULT_DIR)
    return dirs


def locate(data_dir=None) -> Path | None:
    for d in candidate_dirs(data_dir):
        if (d / FILENAME).is_file():
            return d / FILENAME
    return None


def _replace_advice(path: Path) -> str:
    """How to get rid of a bad copy: a shared one (ATTNKIT_DATA_DIR) is not the student's to delete."""
    env = os.environ.get(ENV_VAR)
    if env and Path(path).parent.resolve() == Path(env).resolve():
        return f"it was found through {ENV_VAR}, so ask whoever provides {env} to replace it"
    return f"delete it, then run this again to download a fresh copy from {URL} into {DEFAULT_DIR}"


def verify(path: Path) -> str:
    """Return the text if ``path`` is exactly the published corpus, else raise CorpusError."""
    raw = Path(path).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise CorpusError(
            f"{path} is not the published Tiny Shakespeare file (SHA-256 {digest[:12]}..., "
            f"expected {SHA256[:12]}...): {_replace_advice(path)}.")
    text = raw.decode("utf-8")
    if len(text) != N_CHARS or len(set(text)) != N_SYMBOLS:
        raise CorpusError(f"{path}: expected {N_CHARS:,} characters over {N_SYMBOLS} symbols, "
                          f"found {len(text):,} over {len(set(text))}.")
    return text


def download(dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / FILENAME
    tmp = dest.with_suffix(".part")
    try:
        with urllib.request.urlopen(URL, timeout=30) as r:
            tmp.write_bytes(r.read())
    except OSError as e:
        raise CorpusError(
            f"{FILENAME} was not found in {', '.join(str(d) for d in candidate_dirs())} and the download "
            f"from {URL} failed ({e}): download it from that address yourself and put it in {dest_dir}, "
            f"or set {ENV_VAR} to a folder that holds it.") from None
    verify(tmp)                      # never leave a bad download under the real name
    tmp.replace(dest)
    return dest


def load_text(data_dir=None, allow_download: bool = True) -> str:
    """The verified corpus text; fetches it into the first candidate directory when absent."""
    path = locate(data_dir)
    if path is None:
        if not allow_download:
            raise CorpusError(f"{FILENAME} not found in {', '.join(str(d) for d in candidate_dirs(data_dir))}: "
                              f"put it in {DEFAULT_DIR}, or set {ENV_VAR} to the directory that holds it.")
        # Into the student's own folder (or the course's data/), never into a shared ATTNKIT_DATA_DIR.
        path = download(Path(data_dir) if data_dir else DEFAULT_DIR)
    return verify(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Find (or fetch) and verify the Tiny Shakespeare corpus.")
    ap.add_argument("--data-dir", help=f"directory holding {FILENAME} (default: ${ENV_VAR}, then this file's folder)")
    ap.add_argument("--no-download", action="store_true", help="fail instead of fetching a missing file")
    args = ap.parse_args(argv)
    try:
        text = load_text(args.data_dir, allow_download=not args.no_download)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{locate(args.data_dir)}: OK ({len(text):,} characters, {len(set(text))} symbols, SHA-256 verified)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
