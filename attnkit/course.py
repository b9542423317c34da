"""The course directory: paths, nbgrader's own commands, its gradebook, and the kit's corpus of submissions."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import KIT_ROOT

BIN = Path(sys.executable).parent


def assignments(root: Path = KIT_ROOT) -> list[str]:
    return sorted(p.name for p in (root / "source").iterdir() if (p / f"{p.name}.pct.py").is_file())


def nbgrader(*args: str, cwd: Path, check: bool = True, quiet: bool = True) -> subprocess.CompletedProcess:
    """Run the real `nbgrader` of this environment; its alembic must be on PATH for gradebook creation."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1")
    proc = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=env, text=True,
                          capture_output=quiet)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr or ''}"[-4000:])
    return proc


def write_course_config(course: Path) -> None:
    """A scratch course that uses this kit's nbgrader settings."""
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"load_subconfig({str(KIT_ROOT / 'grading_config' / 'nbgrader_config.py')!r})\n")


def kit_corpus():
    """The kit's own corpus of right and wrong submissions (tests/corpus), for the demo and selfcheck."""
    import importlib
    if str(KIT_ROOT) not in sys.path:
        sys.path.insert(0, str(KIT_ROOT))
    return importlib.import_module("tests.corpus")


def gradebook_scores(course: Path, assignment: str) -> dict[str, dict]:
    """Per student: automatic points, their maximum, and the grade cells that lost points."""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(assignment):
            auto = [g for nb in sub.notebooks for g in nb.grades if g.cell_type == "code"]
            out[sub.student.id] = {
                "auto": sum(g.auto_score or 0 for g in auto), "max": sum(g.max_score for g in auto),
                "lost": [g.name for g in auto if (g.auto_score or 0) < g.max_score],
                "manual_pending": any(g.needs_manual_grade for nb in sub.notebooks for g in nb.grades)}
    return out
