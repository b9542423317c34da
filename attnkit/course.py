"""Paths of the course directory and a way to call nbgrader's own commands."""
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
