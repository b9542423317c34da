"""A new course: the README's instructor steps, in their order, on a fresh clone that shares this venv.

The clone has no gradebook, no submitted/, no grading key. This venv's editable install points at the
checkout that built it (KIT_ROOT), so the clone's attnkit/__init__.py gets a marker line: every process
that imports the clone's kit appends its path to a file. Each step must have run the clone's code, never
KIT_ROOT's (which would release, and record into, the other checkout).
"""
import csv
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests import KIT_ROOT
from attnkit.course import BIN, gradebook_knows
from tests.notebooks import solution_source, submission, write

A = "causal_head"
MARKER_LINE = ('\nimport os as _os\nif _os.environ.get("TEST_KIT_MARKER"):\n'
               '    open(_os.environ["TEST_KIT_MARKER"], "a").write(__file__ + "\\n")\n')


def fresh_clone(dest):
    """`git clone` of the kit, with the working tree's tracked and new files over it (uncommitted edits
    are what is under test; on a clean tree this changes nothing), and without its ignored course state."""
    subprocess.run(["git", "clone", "-q", str(KIT_ROOT), str(dest)], check=True)
    listed = subprocess.run(["git", "-C", str(KIT_ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = KIT_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
        elif (dest / rel).is_file():                           # deleted in the working tree
            (dest / rel).unlink()
    return dest


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    root = fresh_clone(tmp_path_factory.mktemp("new-course") / "clone")
    with open(root / "attnkit" / "__init__.py", "a") as f:
        f.write(MARKER_LINE)
    for state in ("gradebook.db", "submitted", "autograded", "feedback", ".attnkit"):
        assert not (root / state).exists(), f"a fresh clone has no {state}"
    return root


def run(cmd, clone, marker, status=0, timeout=600):
    """A command as an instructor types it in the clone: the venv on PATH, nothing of the kit's on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_RUNS_CHECKOUT")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1", TEST_KIT_MARKER=str(marker))
    marker.unlink(missing_ok=True)
    p = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == status, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    imported = set(marker.read_text().split()) if marker.exists() else set()
    assert imported == {str(clone / "attnkit" / "__init__.py")}, \
        f"{' '.join(cmd)} did not run the clone's kit (imported: {imported or 'none of the clone'})"
    return p


def test_the_readme_steps_work_in_order_on_a_fresh_clone(clone, tmp_path):
    marker = tmp_path / "imported"
    # doctor names the kit it runs: the clone's, though the venv's install points at KIT_ROOT
    p = run([str(BIN / "attnkit"), "doctor"], clone, marker, status=1)    # one problem: no gradebook yet
    assert f"ok   kit       kit code from {clone}" in p.stdout, p.stdout
    assert f"FIX  gradebook {clone / 'gradebook.db'} does not exist yet: `attnkit release` records" in p.stdout, \
        p.stdout

    # 1-2. edit (nothing to change here) and release: the gradebook learns the assignment. The solution run
    # (--no-solutions skips it) writes only solutions/ and costs a kernel, so it is left out here.
    run([str(BIN / "attnkit"), "release", A, "--no-solutions"], clone, marker)
    assert gradebook_knows(f"sqlite:///{clone / 'gradebook.db'}", "attnkit", A), "release left the gradebook without it"

    # 3. collect: one student's submission copied into submitted/
    student = clone / "submitted" / "ada" / A
    shutil.copytree(clone / "release" / A, student)
    write(submission(A, {"head": solution_source(A, "head")}), student / f"{A}.ipynb")

    # 4-6. autograde, feedback, export: nbgrader's own commands from the root
    run([str(BIN / "nbgrader"), "autograde", A], clone, marker)
    run([str(BIN / "nbgrader"), "generate_feedback", A], clone, marker)
    feedback = (clone / "feedback" / "ada" / A / f"{A}.html").read_text()
    assert re.search(r"""class=["']score["']>20 / 20<""", feedback), "the teaching report is missing from the feedback"
    run([str(BIN / "nbgrader"), "export"], clone, marker)
    rows = {r["student_id"]: r for r in csv.DictReader(open(clone / "grades.csv"))}
    assert float(rows["ada"]["raw_score"]) == 20.0 and rows["ada"]["assignment"] == A


def test_a_checkout_that_cannot_run_its_own_code_says_so(clone):
    """When the clone's code cannot be put first (here: the hand-over already marked as done), the
    command stops before doing anything, with one sentence naming both checkouts and the fix."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ATTNKIT_RUNS_CHECKOUT=str(clone))
    env.pop("PYTHONPATH", None)
    p = subprocess.run([str(BIN / "attnkit"), "release", A], cwd=clone, env=env, capture_output=True, text=True)
    assert p.returncode == 1 and not p.stdout
    assert str(clone) in p.stderr and str(KIT_ROOT) in p.stderr and "`make`" in p.stderr, p.stderr


def test_the_doctor_names_the_kit_and_a_mismatch(clone):
    from attnkit.doctor import check_kit
    ok, text = check_kit(KIT_ROOT / "docs")                # inside the running checkout
    assert ok and f"kit code from {KIT_ROOT}" in text
    ok, text = check_kit(clone / "source")                 # inside another: this process runs KIT_ROOT's code
    assert not ok and str(clone) in text and str(KIT_ROOT) in text and f"`make` in {clone}" in text


def test_the_clones_nbgrader_config_refuses_a_process_that_runs_another_kit(clone):
    """Too late to import the clone's preprocessors: the config stops (SystemExit: traitlets would log an
    exception and go on with the stock pipeline, grading without the judge) and names both checkouts."""
    code = ("import attnkit\nfrom traitlets.config.loader import PyFileConfigLoader\n"
            f"PyFileConfigLoader('nbgrader_config.py', path={str(clone / 'grading_config')!r}).load_config()\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=KIT_ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and str(clone) in p.stderr and str(KIT_ROOT) in p.stderr, p.stderr[-2000:]
