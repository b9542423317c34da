"""Build submission notebooks the way a student would (attnkit.mutants), and write them where a test needs."""
from pathlib import Path

import nbformat

from attnkit.mutants import cell, solution_source, submission  # noqa: F401 - the tests' names for them


def write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path
