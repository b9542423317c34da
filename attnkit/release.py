"""Regenerate what is derived from source/: the paired notebooks, release/ and solutions/.

Steps, in order, per assignment:
  SyncSourceNotebook   source/A/A.pct.py  -> source/A/A.ipynb (no outputs, stable ids)
  GenerateRelease      nbgrader generate_assignment -> release/A/
  ExecuteSolution      run the source notebook -> solutions/A/A.ipynb and A.html
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import jupytext
import nbformat

from . import KIT_ROOT
from .course import nbgrader, write_course_config


def source_notebook(pct: Path):
    """The notebook a jupytext percent script describes, with ids that do not change run to run."""
    nb = jupytext.read(pct)
    for i, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{i:03d}"
        cell.pop("outputs", None) if cell.cell_type != "code" else cell.update(outputs=[], execution_count=None)
    nb.metadata.pop("jupytext", None)
    nb.metadata["jupytext"] = {"formats": "ipynb,.pct.py:percent"}
    nbformat.validate(nb)
    return nb


def sync_source(assignment: str, root: Path = KIT_ROOT) -> Path:
    src = root / "source" / assignment
    path = src / f"{assignment}.ipynb"
    nbformat.write(source_notebook(src / f"{assignment}.pct.py"), path)
    return path


def generate_release(assignment: str, root: Path = KIT_ROOT, dest: Path | None = None) -> Path:
    """Run nbgrader generate_assignment in a scratch course; copy the result to dest (default release/A)."""
    dest = dest or root / "release" / assignment
    with tempfile.TemporaryDirectory(prefix="attnkit-release-") as tmp:
        course = Path(tmp)
        write_course_config(course)
        shutil.copytree(root / "source" / assignment, course / "source" / assignment, symlinks=False)
        nbgrader("generate_assignment", assignment, "--force", cwd=course)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(course / "release" / assignment, dest)
    return dest


def execute_solution(assignment: str, root: Path = KIT_ROOT, timeout: int = 600) -> Path:
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    src = root / "source" / assignment
    nb = nbformat.read(src / f"{assignment}.ipynb", as_version=4)
    env_backup = dict(os.environ)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(src)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    out = root / "solutions" / assignment
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / f"{assignment}.ipynb")
    html, _ = HTMLExporter().from_notebook_node(nb)
    (out / f"{assignment}.html").write_text(html)
    return out


def release(assignments: list[str], root: Path = KIT_ROOT, solutions: bool = True, log=print) -> None:
    for a in assignments:
        log(f"{a}: SyncSourceNotebook -> {sync_source(a, root).relative_to(root)}")
        log(f"{a}: GenerateRelease    -> {generate_release(a, root).relative_to(root)}")
        if solutions:
            log(f"{a}: ExecuteSolution    -> {execute_solution(a, root).relative_to(root)}")
