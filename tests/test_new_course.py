"""A second course, apart from this checkout: the installed kit works on whichever course it is run in.

The course is built in a scratch folder outside the checkout, as an instructor would start one: its own
nbgrader_config.py and grading_config/, its own autograder/ (a copy of this course's causal_head plug-in, with
its source), and nothing else (no gradebook, no release, no key). Every step runs there with this venv's
`attnkit` and `nbgrader`, nothing of the checkout on PYTHONPATH or as the current directory: release,
autograde (stock nbgrader and attnkit's), feedback, the class report and the exports. Each writes into the
second course, and the checkout's own course files are unchanged (digested before and after).
"""
import csv
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import time

import pytest

from attnkit.course import BIN, gradebook_knows
from tests import KIT_ROOT
from tests.notebooks import solution_source, submission, write

A = "causal_head"
COURSE_FILES = ("autograder", "source", "release", "grading_config", "nbgrader_config.py", ".attnkit")


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


def digest(root) -> str:
    h = hashlib.sha256()
    for name in COURSE_FILES:
        for p in sorted((root / name).rglob("*")) if (root / name).is_dir() else [root / name]:
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def new_course(folder):
    """A course as an instructor starts one: config, grading settings, one assignment's plug-in and source."""
    folder.mkdir(parents=True)
    shutil.copy(KIT_ROOT / "nbgrader_config.py", folder)
    shutil.copytree(KIT_ROOT / "grading_config", folder / "grading_config")
    shutil.copytree(KIT_ROOT / "autograder" / A, folder / "autograder" / A, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "source").mkdir()
    (folder / "source" / A).symlink_to(os.path.join("..", "autograder", A, "source"))
    return folder


def run(cmd, course, status=0, timeout=900):
    """A command as an instructor types it in the course: the venv on PATH, nothing of the checkout's on
    PYTHONPATH, the course's own grading key (the suite's fixed one is not given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_GRADING_KEY")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, cwd=course, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == status, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return p


def test_a_second_course_walks_release_autograde_feedback_report_and_export(tmp_path):
    course = new_course(tmp_path / "second-course")
    assert not str(course).startswith(str(KIT_ROOT))
    before = digest(KIT_ROOT)
    timings = {}

    def step(name, cmd, status=0):
        t0 = time.monotonic()
        p = run(cmd, course, status)
        timings[name] = time.monotonic() - t0
        return p

    p = step("doctor", [str(BIN / "attnkit"), "doctor"], status=1)     # one problem: no gradebook yet
    assert f"on the course {course}" in p.stdout, p.stdout

    step("release", [str(BIN / "attnkit"), "release", A, "--no-solutions"])
    assert (course / "release" / A / f"{A}.ipynb").is_file()
    assert gradebook_knows(f"sqlite:///{course / 'gradebook.db'}", "attnkit", A)

    # collect: a correct head and one without the 1/sqrt(d_k) scaling
    answers = {"ada": solution_source(A, "head")}
    answers["ben"] = answers["ada"].replace("/ k.shape[-1]**0.5", "")
    assert answers["ben"] != answers["ada"]
    for student, answer in answers.items():
        folder = course / "submitted" / student / A
        shutil.copytree(course / "release" / A, folder)
        write(submission(A, {"head": answer}), folder / f"{A}.ipynb")

    step("nbgrader autograde", [str(BIN / "nbgrader"), "autograde", A])
    step("nbgrader generate_feedback", [str(BIN / "nbgrader"), "generate_feedback", A])
    feedback = (course / "feedback" / "ada" / A / f"{A}.html").read_text()
    assert re.search(r"""class=["']score["']>20 / 20 <span class=["']score-what["']>automatic points<""", feedback), \
        "the teaching report is missing"
    report = step("attnkit report", [str(BIN / "attnkit"), "report", A]).stdout.strip()
    assert report == str(course / "reports" / f"{A}-class-report.html")
    assert "../feedback/ada/causal_head/causal_head.html" in (course / "reports" / f"{A}-class-report.html").read_text()
    exported = step("attnkit export", [str(BIN / "attnkit"), "export", A]).stdout
    totals = {r["student_id"]: float(r["total"]) for r in csv.DictReader(io.StringIO(exported))}
    assert totals["ada"] == 20.0 and totals["ben"] < 20.0, totals

    # attnkit's own autograde, again over the class, agrees with nbgrader's on every student
    step("attnkit autograde", [str(BIN / "attnkit"), "autograde", A, "--force", "--jobs", "2"])
    again = step("attnkit export (again)", [str(BIN / "attnkit"), "export", A]).stdout
    assert {r["student_id"]: float(r["total"]) for r in csv.DictReader(io.StringIO(again))} == totals

    # the course keeps its own key, owner-only, beside its state; the checkout's course files did not move
    key = course / ".attnkit" / "grading-key"
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (course / ".attnkit" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert digest(KIT_ROOT) == before, "a step in the second course changed this checkout's course"
    print("second course: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


def test_a_folder_that_is_no_course_is_told_so(tmp_path):
    p = run([str(BIN / "attnkit"), "release", A, "--no-solutions"], tmp_path, status=2)
    assert f"{tmp_path} is not an attnkit course" in p.stderr and "--course-dir" in p.stderr, p.stderr
    assert not any(tmp_path.iterdir()), "nothing is written in a folder that is no course"
