"""The kit installed as a course installs it, and a new course walked from nothing to its report.

As docs/instructors.md tells an instructor ("Install the kit for a course", "Start your own course"): a wheel is
built from a clone of this checkout, installed (not editable) into a new venv outside the checkout, which pip
fills from attnkit's declared requirements with the exact pins of requirements.lock (--constraint), and then,
in an empty folder with only that venv on PATH: quickstart, new, release, two submissions collected (the
solution and the unanswered release), autograde, generate_feedback, report, export, doctor. Every step exits 0,
the solution scores full automatic marks (its written answer waits for a TA), the unanswered notebook zero; the
course keeps its own key, and this checkout's course files do not change.

Hermetic: pip reads no index. Its only source is a wheelhouse of this venv's own distributions (the lock's
pins, as `make venv` installed them: tests/wheelhouse.py), kept in .venv/ between runs under a digest of what
the venv holds, so pip must resolve attnkit's requirements from one version of each package: a range that
leaves out a pin of the lock fails the install. ``--no-compile`` spares minutes of bytecode for torch's files
(they are compiled as they are imported instead); nothing else differs from what the docs say.
"""
from __future__ import annotations

import csv
import hashlib
import importlib.metadata as md
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from filelock import FileLock

from tests import KIT_ROOT, wheelhouse
from tests.test_new_course import digest, fresh_clone

A = "week5"
DEV_BIN = Path(sys.executable).parent


def _venv_digest() -> str:
    """What this venv holds (name and version of every distribution), as a short digest."""
    paths = sysconfig.get_paths()
    dists = md.distributions(path=sorted({paths["purelib"], paths["platlib"]}))
    return hashlib.sha256("\n".join(sorted(f"{d.metadata['Name']}=={d.version}" for d in dists)).encode()
                          ).hexdigest()[:16]


def the_wheelhouse() -> Path:
    """This venv's distributions as wheels, built once for what the venv holds (a minute) and kept beside it."""
    folder = Path(sys.prefix) / f".wheelhouse-{_venv_digest()}"
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            wheelhouse.build(folder)
            (folder / ".built").touch()
    return folder


def pip_env() -> dict[str, str]:
    """No pip configuration of this machine (its indexes, find-links, constraints): the command line is all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def run(cmd, cwd, env, timeout=900):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    said = f"{p.stdout[-3000:]}\n{p.stderr[-4000:]}"
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{said}"
    return p


def scores(course: Path) -> dict[str, tuple[float, float, bool]]:
    """student -> (automatic points, their maximum, whether a cell waits for a TA) of A, from the gradebook."""
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "mycourse") as gb:
        return {s.student.id: (s.code_score, s.max_code_score, s.needs_manual_grade)
                for s in gb.assignment_submissions(A)}


def test_an_instructor_installs_the_kit_and_walks_a_new_course(tmp_path):
    timings = {}

    def step(name, cmd, cwd, env, timeout=900):
        t0 = time.monotonic()
        p = run(cmd, cwd, env, timeout)
        timings[name] = time.monotonic() - t0
        return p

    before = digest(KIT_ROOT)
    t0 = time.monotonic()
    houses = the_wheelhouse()
    timings["wheelhouse (kept between runs)"] = time.monotonic() - t0

    # the kit: a clone of this checkout (its uncommitted edits too), built into a wheel as `pip wheel` does
    clone = fresh_clone(tmp_path / "attnkit-clone")
    step("pip wheel (the clone)", [DEV_BIN / "python", "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                   "-w", tmp_path / "dist", clone], tmp_path, pip_env())
    wheel, = (tmp_path / "dist").glob("attnkit-*.whl")

    # a new venv, outside the checkout, that sees nothing of this one
    venv = tmp_path / "venv"
    assert not str(venv).startswith(str(KIT_ROOT))
    step("python -m venv", [sys.executable, "-m", "venv", venv], tmp_path, pip_env())
    step("pip install (the wheel, --constraint requirements.lock)",
         [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile", "--no-index", "--find-links", houses,
          "--constraint", clone / "requirements.lock", wheel], tmp_path, pip_env(), timeout=1200)

    # the instructor's shell: that venv activated, nothing of this checkout's, the course's own grading key
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ATTNKIT_GRADING_KEY", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    work = tmp_path / "courses"
    work.mkdir()
    step("attnkit quickstart mycourse", ["attnkit", "quickstart", "mycourse"], work, env)
    course = work / "mycourse"
    step(f"attnkit new {A}", ["attnkit", "new", A], course, env)
    step(f"attnkit release {A}", ["attnkit", "release", A], course, env)
    assert (course / "release" / A / f"{A}.ipynb").is_file() and (course / "solutions" / A / f"{A}.ipynb").is_file()

    # collect: the executed solution, and the release handed back unanswered
    for student, notebook in (("ada", course / "solutions" / A / f"{A}.ipynb"),
                              ("ben", course / "release" / A / f"{A}.ipynb")):
        (course / "submitted" / student / A).mkdir(parents=True)
        shutil.copy(notebook, course / "submitted" / student / A / f"{A}.ipynb")

    step(f"attnkit autograde {A}", ["attnkit", "autograde", A], course, env)
    step(f"nbgrader generate_feedback {A}", ["nbgrader", "generate_feedback", A], course, env)
    report = step(f"attnkit report {A}", ["attnkit", "report", A], course, env).stdout.strip()
    exported = step(f"attnkit export {A}", ["attnkit", "export", A], course, env).stdout
    doctor = step("attnkit doctor", ["attnkit", "doctor"], course, env).stdout

    got = scores(course)        # full automatic marks and zero; the solution's written answer waits for a TA
    assert got["ada"][0] == got["ada"][1] > 0 and got["ben"][0] == 0 and got["ada"][2], got
    totals = {r["student_id"]: float(r["total"]) for r in csv.DictReader(io.StringIO(exported))}
    assert totals == {"ada": got["ada"][0], "ben": 0.0}, exported
    for student in ("ada", "ben"):
        assert (course / "feedback" / student / A / f"{A}.html").is_file()
    assert report == str(course / "reports" / f"{A}-class-report.html") and Path(report).is_file()
    assert re.search(rf"^ok +kit +attnkit \S+ from {re.escape(str(venv))}/lib/", doctor, re.M), doctor
    assert re.search(r"^ok +packages +\d+ requirements of attnkit", doctor, re.M), doctor
    assert doctor.rstrip().endswith("all good"), doctor
    shown = run([venv / "bin" / "python", "-m", "pip", "show", "-f", "attnkit"], tmp_path, pip_env()).stdout
    assert f"Location: {venv}" in shown and "Editable" not in shown, shown
    assert "attnkit/templates/course/grading_config/nbgrader_config.py.j2" in shown, "package data left out"
    assert not re.search(r"^\s+autograder/", shown, re.M), "a course's autograder/ is no package of the installed kit"
    # the course keeps its own key, owner-only, beside its state; this checkout's course files did not move
    key = course / ".attnkit" / "grading-key"
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (course / ".attnkit" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert digest(KIT_ROOT) == before, "a step in the new course changed this checkout's course"
    print("install journey: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
