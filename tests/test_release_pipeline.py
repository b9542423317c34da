"""`attnkit release` in a course of its own: it finds the corpora as every command does and hands them to the
solution kernel, a failing solution cell is one sentence, and a failure anywhere leaves the course as it was
(issue 30, item 3)."""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from tests import KIT_ROOT
from tests.conftest import copy_course, scratch_course
from attnkit.engine import datasets
from attnkit.gradebook import locate

ATTNKIT = Path(os.sys.executable).parent / "attnkit"
SHARED = datasets.data_dir(root=KIT_ROOT)          # where this checkout's corpora are, for the copies below


def _with_data(course: Path, *assignments: str) -> Path:
    """Put each assignment's verified corpus in the course's own data/ (the place a new instructor uses)."""
    (course / "data").mkdir(exist_ok=True)
    for a in assignments:
        for name, sha in datasets.needed(a, KIT_ROOT).items():
            shutil.copyfile(datasets.verified(name, sha, SHARED), course / "data" / name)
    return course


def _shell_env() -> dict:
    """The shell of an instructor who never set ATTNKIT_DATA_DIR."""
    env = {k: v for k, v in os.environ.items() if k != datasets.ENV_VAR}
    return env


def _digest(course: Path) -> dict:
    """Every byte of what a release writes: source/, release/, solutions/ and the gradebook."""
    files = {}
    for top in ("source", "release", "solutions"):
        for p in sorted((course / top).rglob("*")) if (course / top).exists() else []:
            if p.is_file():
                files[str(p.relative_to(course))] = hashlib.sha256(p.read_bytes()).hexdigest()
    db = locate(course).path
    files["gradebook"] = hashlib.sha256(db.read_bytes()).hexdigest() if db and db.is_file() else None
    return files


def test_release_from_the_shell_finds_the_data_in_the_courses_data_folder(tmp_path):
    """A fresh course with its corpus in data/ and no ATTNKIT_DATA_DIR: `attnkit release` runs the solution
    (whose helper reads ATTNKIT_DATA_DIR or its own folder, never the course's data/) to the end."""
    course = _with_data(scratch_course(tmp_path / "course", ("causal_head",)), "causal_head")
    proc = subprocess.run([str(ATTNKIT), "release", "causal_head"], cwd=course, env=_shell_env(),
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(course / "solutions" / "causal_head" / "causal_head.ipynb", as_version=4)
    errors = [c.id for c in nb.cells if any(o.output_type == "error" for o in c.get("outputs", []))]
    assert not errors, errors
    data_cell = next(c for c in nb.cells if c.source.startswith("from corpus import load_text"))
    assert "1,115,394 characters" in "".join(o.get("text", "") for o in data_cell.outputs)     # the whole corpus read
    assert (course / "release" / "causal_head" / "tinyshakespeare.txt").is_file()     # handed out with the release
    assert locate(course).path.is_file()                                    # and the gradebook knows it


@pytest.fixture
def released_with_solutions(tmp_path, released_course):
    """A course where causal_head was released, with its solutions and its corpus in data/."""
    course = copy_course(released_course, tmp_path / "course")
    shutil.copytree(KIT_ROOT / "solutions" / "causal_head", course / "solutions" / "causal_head")
    return _with_data(course, "causal_head")


def _break_a_solution_cell(course: Path) -> None:
    pct = course / "source" / "causal_head" / "causal_head.pct.py"
    text = pct.read_text()
    demo = "d, dh, T, B = 32, 16, 8, 4\n"
    assert text.count(demo) == 1
    pct.write_text(text.replace(demo, demo + "raise ZeroDivisionError('a slip')\n"))


def test_a_failing_solution_cell_is_one_sentence_and_leaves_the_course_byte_identical(released_with_solutions):
    course = released_with_solutions
    _break_a_solution_cell(course)
    before = _digest(course)
    assert before["gradebook"] and any(k.startswith("solutions/") for k in before)
    proc = subprocess.run([str(ATTNKIT), "release", "causal_head"], cwd=course, env=_shell_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    # the kernel's own start-up warnings reach stderr too (ipykernel's); the release says one line
    err = [line for line in proc.stderr.splitlines() if line.startswith("attnkit release")]
    assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert err[0].startswith("attnkit release: source/causal_head/causal_head.ipynb: cell ")
    assert "raised ZeroDivisionError" in err[0] and "a slip" not in err[0]
    assert _digest(course) == before


def test_a_gradebook_that_fails_puts_back_release_source_and_gradebook(released_with_solutions, monkeypatch):
    """The last step, the gradebook's record, fails after the folders were replaced: every byte goes back."""
    from attnkit import course as course_module
    from attnkit.release import release
    course = released_with_solutions
    (course / "release" / "causal_head" / "causal_head.ipynb").write_text("{}")        # stale: the release rewrites it
    before = _digest(course)
    db = locate(course).path

    def broken(root, assignments, log=print):
        db.write_bytes(b"half a gradebook")
        raise RuntimeError("nbgrader generate_assignment failed")
    monkeypatch.setattr(course_module, "record_in_gradebook", broken)
    with pytest.raises(RuntimeError, match="nbgrader generate_assignment failed"):
        release(["causal_head"], root=course, solutions=False, log=lambda m: None, data_dir=course / "data")
    assert _digest(course) == before


def test_the_solution_kernel_runs_the_instructions_every_x86_machine_has(monkeypatch):
    """A training cell's printed loss and sampled text moved between machines (4.079 where a release was made,
    4.077 on an AVX-512 machine, 4.077 again with another sampled story under AVX2): the solution kernel pins
    torch's, MKL's and oneDNN's instruction sets, whatever the releasing shell has set."""
    from attnkit.release import kernel_env
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    env = kernel_env()
    assert (env["ATEN_CPU_CAPABILITY"], env["MKL_CBWR"], env["ONEDNN_MAX_CPU_ISA"]) == ("default", "COMPATIBLE",
                                                                                       "SSE41")
    assert env["OMP_NUM_THREADS"] == "1"
