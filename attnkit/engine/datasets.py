"""The course's corpora, for every kit command: where they are, which an assignment needs, and whether a copy
is the published file. (What a student's notebook does is its released helper's business: the manifest's
[data] names that helper, whose constants say the file and its SHA-256, so the digest is written once.)

Where: the directory given (``--data-dir``), else ``$ATTNKIT_DATA_DIR``, else ``../shared/data`` beside the
checkout when it exists, else the course's ``data/`` (the Makefile's default is the same).
"""
from __future__ import annotations

import ast
import hashlib
import os
from pathlib import Path

from attnkit.engine import config, registry



ENV_VAR = "ATTNKIT_DATA_DIR"


class CorpusProblem(ValueError):
    """A corpus is missing or is not the published file; the message is one sentence that says what to do."""


def data_dir(explicit=None, root: Path | None = None) -> Path:
    root = registry.course() if root is None else Path(root)
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    shared = root.parent / "shared" / "data"
    return shared if shared.is_dir() else root / "data"


def helper_constants(assignment: str, root: Path | None = None) -> dict:
    """The constants (NAME = literal) of the released helper the manifest's [data] names ({} for no [data])."""
    root = registry.course() if root is None else Path(root)
    data = config.load(assignment).data
    if not data:
        return {}
    tree = ast.parse((root / "source" / assignment / data["helper"]).read_text())
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) for t in node.targets if isinstance(t, ast.Name)}


def needed(assignment: str, root: Path | None = None) -> dict[str, str]:
    """{file name: SHA-256} of the corpus a student of ``assignment`` needs beside the notebook ({} for none)."""
    root = registry.course() if root is None else Path(root)
    data, consts = config.load(assignment).data, helper_constants(assignment, root)
    return {consts[data["file_constant"]]: consts[data["sha256_constant"]]} if data else {}


def verified(name: str, sha256: str, source: Path) -> Path:
    """``source/name`` when it is the published file; else CorpusProblem."""
    path = Path(source) / name
    if not path.is_file():
        raise CorpusProblem(f"{name} is not in {source}: run `attnkit data fetch` to download and verify it there, "
                            f"or set ATTNKIT_DATA_DIR (or --data-dir) to a folder that holds it (data/SOURCES.md "
                            f"says where each corpus comes from)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise CorpusProblem(f"{path} has SHA-256 {digest[:12]}..., not the published {sha256[:12]}...: replace it "
                            f"with the published file (delete it and run `attnkit data fetch`)")
    return path


def every_needed(root: Path | None = None) -> dict[str, str]:
    """{file name: SHA-256} over every assignment of the registry."""
    root = registry.course() if root is None else Path(root)
    return {name: sha for a in registry.names() for name, sha in needed(a, root).items()}
