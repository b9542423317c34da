"""The course directory: paths, nbgrader's own commands, its gradebook, and the kit's corpus of submissions."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from attnkit.engine import registry
from attnkit.gradebook import Location, opened
from attnkit import mutants
from attnkit.gradebook import locate, opened

BIN = Path(sys.executable).parent


def assignments() -> list[str]:
    """The course's assignments: the registry's list (one per autograder/<A>/manifest.toml), the only one."""
    return registry.names()


# The real nbgrader of this environment, started as its console script starts it (sys.exit(main())), in a
# process that leaves out the one import no attnkit command uses (attnkit/fast_start.py): 1.4 s less each.
NBGRADER = [str(BIN / "python"), "-c", "import sys, attnkit; sys.argv[0] = 'nbgrader'; "
            "from nbgrader.apps.nbgraderapp import main; sys.exit(main())"]


def nbgrader(*args: str, cwd: Path, check: bool = True, quiet: bool = True) -> subprocess.CompletedProcess:
    """Run the real `nbgrader` of this environment; its alembic must be on PATH for gradebook creation."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1")
    proc = subprocess.run([*NBGRADER, *args], cwd=cwd, env=env, text=True, capture_output=quiet)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr or ''}"[-4000:])
    return proc


def gradebook_knows(db_url: str, course_id: str, assignment: str) -> bool:
    """Whether the gradebook holds ``assignment`` with its notebooks (what autograde grades against).

    An assignment added by `nbgrader db assignment add` alone has no notebooks: nbgrader autograde
    would then skip every submitted notebook, so it counts as unknown. A missing SQLite file is
    not created here (nbgrader's Gradebook would create it empty).
    """
    from nbgrader.api import MissingEntry

    where = Location(db_url, course_id)
    if not where.exists():
        return False
    with opened(where) as gb:
        try:
            return bool(gb.find_assignment(assignment).notebooks)
        except MissingEntry:
            return False


def record_in_gradebook(course: Path, assignments: list[str], log=print) -> None:
    """Teach the course's gradebook each assignment: its notebooks, grade cells and points from source/.

    This is what `nbgrader generate_assignment` records, run from the course root with the course's
    own configuration (its db_url, course_id), but with the student version written to a scratch
    folder: release/ is the kit's committed release, made by `attnkit release`, and stays untouched.
    A fresh clone has no gradebook; nbgrader's own `generate_assignment A` would only print
    "Skipping existing assignment" there, because release/A already exists.
    """
    for a in assignments:
        with tempfile.TemporaryDirectory(prefix="attnkit-gradebook-") as scratch:
            nbgrader("generate_assignment", a, "--force", f"--CourseDirectory.release_directory={scratch}",
                     cwd=Path(course))
        log(f"{a}: RecordInGradebook  -> the gradebook knows its notebooks, grade cells and points")


def write_course_config(course: Path, like: Path | None = None) -> None:
    """Make ``course`` a scratch course graded as the course ``like`` (default: the current one) is: its
    nbgrader_config.py loads that course's grading_config/, and its autograder/ is a link to that course's
    hidden autograders (the grading key stays each course's own, in its .attnkit/)."""
    like = registry.course() if like is None else Path(like).resolve()
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"load_subconfig({str(like / 'grading_config' / 'nbgrader_config.py')!r})\n")
    link = course / registry.PACKAGE
    if not link.exists():
        link.symlink_to(like / registry.PACKAGE, target_is_directory=True)


def kit_corpus():
    """The kit's own corpus of right and wrong submissions (each assignment's mutants.py), for the demo and
    selfcheck."""
    return mutants


def gradebook_scores(course: Path, assignment: str) -> dict[str, dict]:
    """Per student: automatic points, their maximum, and the grade cells that lost points, from the gradebook
    the course's nbgrader configuration names (gradebook.NoGradebook when it does not exist)."""
    out = {}
    with opened(locate(course)) as gb:
        for sub in gb.assignment_submissions(assignment):
            auto = [g for nb in sub.notebooks for g in nb.grades if g.cell_type == "code"]
            out[sub.student.id] = {
                "auto": sum(g.auto_score or 0 for g in auto), "max": sum(g.max_score for g in auto),
                "lost": [g.name for g in auto if (g.auto_score or 0) < g.max_score],
                # each written answer a TA grades: (their score, None until they do; its maximum)
                "written": [(g.manual_score, g.max_score) for nb in sub.notebooks for g in nb.grades
                            if g.cell_type == "markdown"]}
    return out
