"""Build submission notebooks the way a student would: the release with the answer cell filled in."""
from pathlib import Path

import nbformat

from attnkit import KIT_ROOT


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def solution_source(assignment: str, grade_id: str) -> str:
    nb = nbformat.read(KIT_ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    return cell(nb, grade_id).source


def submission(assignment: str, answers: dict[str, str], base: str = "release"):
    """The committed release (or source) notebook with the cells named in ``answers`` replaced."""
    nb = nbformat.read(KIT_ROOT / base / assignment / f"{assignment}.ipynb", as_version=4)
    for grade_id, src in answers.items():
        cell(nb, grade_id).source = src
    return nb


def write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path
