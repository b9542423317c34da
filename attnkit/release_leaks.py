"""What a release must never show: a line of the instructor's solution or hidden tests.

nbgrader strips the ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` and hidden-test regions of the notebook it
releases; a solution line can still reach the student another way (a docstring of a helper released beside the
notebook, a markdown cell that quotes it). This reads those regions of the percent script and looks for each of
their lines in every file of a release folder. `attnkit check` and tests/course/test_source_and_release.py share it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

REGIONS = (("### BEGIN SOLUTION", "### END SOLUTION"), ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"))
SHORTEST = 13          # shorter lines (``super().__init__()``, ``return out``) are the language, not the answer


def secret_lines(pct: Path) -> set[str]:
    """The lines of the solution and hidden-test regions of ``pct`` (a jupytext percent script), stripped of
    indentation and comment marks, long enough to be the answer's own."""
    text = Path(pct).read_text()
    found = set()
    for begin, end in REGIONS:
        for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), text, flags=re.S):
            found |= {line.strip().lstrip("# ").strip() for line in block.splitlines()}
    return {line for line in found if len(line) >= SHORTEST}


def _text(path: Path) -> str:
    """What a student reads of ``path``: a notebook's cell sources, any other file's text."""
    text = path.read_text(errors="replace")
    if path.suffix == ".ipynb":
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
    return text


def leaks(release: Path, secret: set[str], skip=frozenset()) -> dict[str, list[str]]:
    """file name -> the secret lines it shows, for each file of ``release`` (but ``skip``) that shows any;
    a percent script in a release is a leak of its own (it is the whole source)."""
    found = {}
    for path in sorted(Path(release).iterdir()):
        if not path.is_file() or path.name in skip:
            continue
        if path.name.endswith(".pct.py"):
            found[path.name] = ["the instructor's percent script itself"]
            continue
        shown = sorted(line for line in secret if line in _text(path))
        if shown:
            found[path.name] = shown
    return found
