"""Where the kit's own code names a word: the guard that keeps every assignment's name out of the kit's code
(tests/test_registry.py), and the names `attnkit new` refuses because that code already uses them.

The kit's code is what must work for any assignment the registry finds: attnkit/, bench/, the Makefile and
pyproject.toml of the kit's source tree (a course's autograder/ is where assignments are named). In Python a word counts as a name or inside a string, not in a comment (prose may
use an ordinary word an assignment is also called); in any other file every word counts.
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from attnkit import KIT_SOURCE

KIT_CODE = ("attnkit", "bench")
SUFFIXES = {".py", ".j2", ".sh", ".toml", ".cfg", ""}


def kit_files(root: Path) -> list[Path]:
    files = [p for room in KIT_CODE for p in sorted((root / room).rglob("*"))
             if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts]
    # an installed kit (site-packages) has neither: its code is attnkit/ alone
    return files + [p for p in (root / "Makefile", root / "pyproject.toml") if p.is_file()]


def _spans(p: Path) -> list[tuple[int, str]]:
    """(line number, text) of what counts in ``p``: Python's names and strings, or every line elsewhere."""
    text = p.read_text(errors="replace")
    if p.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type in (tokenize.NAME, tokenize.STRING)]


def naming(names, files, root: Path) -> list[tuple[str, int, str]]:
    """(file, line number, name) wherever one of ``files`` names one of ``names`` (as a whole word)."""
    words = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return [(p.relative_to(root).as_posix(), i, m.group(1)) for p in files for i, s in _spans(p)
            for m in words.finditer(s)]


def first_use(name: str, root: Path = KIT_SOURCE) -> str | None:
    """``file:line`` of the first place the kit's code names ``name``, or None when it names it nowhere."""
    found = naming([name], kit_files(root), root)
    return f"{found[0][0]}:{found[0][1]}" if found else None
