"""`attnkit autograde`: a whole class in parallel, with nbgrader's own pipeline, resumable, hang-proof.

Small classes (the demo's sample class) keep this file within a few minutes on two cores.
"""
import argparse
import csv
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbgrader.api import Gradebook

from tests import KIT_ROOT
from attnkit import autograde
from attnkit.course import BIN, nbgrader
from attnkit.demo import sample_class
from attnkit.engine import config
from tests.conftest import STUDENT_HELPER, copy_course
from tests.notebooks import cell, solution_source

A = "causal_head"
CHECKS = config.load(A).checks
# The judge's wall-clock limit per submission, lowered from the manifest's 60 s for the hanging-submission test
# (it is what that test waits out): the kit reads it from config.load wherever it applies it (the judge's child,
# autograde's watchdog), as it reads the manifest's; 30 s leaves the other students twice the time they take
# under load (about 15 s) to finish before the hung one is ended.
WALL = 30.0
assert WALL < config.load(A).limits.wall_seconds    # else the test would wait longer than the kit's own limit


def _args(course, *extra):
    p = argparse.ArgumentParser()
    autograde.add_arguments(p)
    return p.parse_args([A, "--course-dir", str(course), *extra])


def _class(course, keep=None):
    """The demo's class (or the students in ``keep``) handed in to ``course``, a copy of the session's course
    with the assignment generated (the ``released`` fixture, tests/conftest.py)."""
    students = sample_class(course, A)
    for s in set(students) - set(keep or students):
        shutil.rmtree(course / "submitted" / s)
    return sorted(keep or students)


def _gradebook(course) -> dict:
    """Everything nbgrader recorded per student: grades and comments of every cell, and the submission's totals."""
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(A):
            rows = out.setdefault(sub.student.id, {"score": sub.score, "max": sub.max_score,
                                                   "late": sub.late_submission_penalty})
            for nb in sub.notebooks:
                for g in nb.grades:
                    rows[(nb.name, g.name)] = (g.auto_score, g.manual_score, g.needs_manual_grade, g.max_score)
                for c in nb.comments:
                    rows[(nb.name, "comment", c.name)] = (c.auto_comment, c.manual_comment)
    return out


def _markers(course) -> dict:
    state = course / autograde.STATE_DIR / A
    return {p.stem: (p.stat().st_mtime_ns, p.read_text()) for p in state.glob("*.json") if p.name != "last_run.json"}


def _wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def _alive(pid) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(pid) -> set[int]:
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _scratch_left(workers) -> list:
    return [d for w in workers for d in Path(tempfile.gettempdir()).glob(f"attnkit-autograde-worker{w}-*")]


_started: list = []          # the runs a test started: ended with their whole session when it ends, pass or fail


@pytest.fixture(autouse=True)
def _end_started_runs():
    yield
    while _started:
        run = _started.pop()
        if run.poll() is None:
            try:
                os.killpg(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            run.wait(timeout=30)


def _start(course, log: Path, jobs=1):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONPATH=str(KIT_ROOT))
    run = subprocess.Popen([sys.executable, "-m", "attnkit", "autograde", A, "--jobs", str(jobs), "--course-dir",
                            str(course)], cwd=KIT_ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=open(log, "w"), start_new_session=True, preexec_fn=_as_from_a_terminal)
    _started.append(run)
    return run


def _as_from_a_terminal():
    # A command typed at a terminal starts with SIGINT at its default; one started in the background of a
    # non-interactive shell (as a CI runner may start the suite) inherits it ignored, and Ctrl-C never arrives.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _worker_pids(log: Path) -> list[int]:
    for line in log.read_text().splitlines():
        if "worker(s), pids" in line:
            return [int(p) for p in line.split("pids", 1)[1].replace(",", " ").split()]
    return []


def test_parallel_run_records_what_sequential_nbgrader_autograde_records(nbgrader_class, tmp_path, capsys):
    # the reference: stock `nbgrader autograde` (kernel run included) of the same class, handed in the same way
    # (the session's nbgrader_class, tests/conftest.py); ours grades a copy of that course as it was handed in
    reference = nbgrader_class(A)
    twin = reference.graded
    # each handed in a copy of the released helpers that would end a kernel run that imported it
    helpers = [h.name for h in (twin / "source" / A).glob("*.py") if not h.name.endswith(".pct.py")]
    assert helpers and all((twin / "submitted" / s / A / h).read_text() == STUDENT_HELPER
                           for s in reference.students for h in helpers)
    course = copy_course(reference.submitted, tmp_path / "course")
    students = ["ada", "ben", "cy"]
    for s in set(reference.students) - set(students):     # three students keep this test short
        shutil.rmtree(course / "submitted" / s)
    assert autograde.main(_args(course, "--jobs", "2")) == 0

    ours, theirs = _gradebook(course), _gradebook(twin)
    assert sorted(ours) == students
    assert ours == {s: theirs[s] for s in students}   # every grade cell, comment, total and late penalty
    assert ours["ada"]["score"] == 20 and ours["ben"]["score"] == 0 and 0 < ours["cy"]["score"] < 20
    assert ours["ada"][(A, "written_trap")][2] is True          # the written answer still waits for a TA
    for s in students:                                            # autograded/ holds what nbgrader writes there
        nbformat.read(course / "autograded" / s / A / f"{A}.ipynb", as_version=4)
        assert (course / "autograded" / s / A / "corpus.py").is_file()

    # the stock export works on this gradebook and says what it says for nbgrader's own run
    nbgrader("export", cwd=course)                      # (the reference's grades.csv: nbgrader_class's export)
    mine = list(csv.DictReader(open(course / "grades.csv")))
    assert mine == [r for r in csv.DictReader(open(twin / "grades.csv")) if r["student_id"] in students]
    assert {r["student_id"]: float(r["raw_score"]) for r in mine}["ada"] == 20.0

    # the per-check CSV: one row per student per check, the gradebook's points, the judge's words
    rows = list(csv.DictReader(open(course / "autograded" / f"{A}-checks.csv")))
    assert len(rows) == len(students) * len(CHECKS)
    assert {(r["student"], r["check"]) for r in rows} == {(s, c.id) for s in students for c in CHECKS}
    for r in rows:
        assert float(r["points"]) == ours[r["student"]][(A, r["grade_cell"])][0]
        assert (r["passed"] == "yes") == (float(r["points"]) == float(r["max_points"]))
    assert any("sum to 1" in r["message"] for r in rows if r["student"] == "cy")
    assert all(r["diagnosis"] for r in rows if r["student"] == "cy" and r["passed"] == "no")

    # run again: nothing to do, nothing touched; bad usage says so with status 2
    before = _markers(course)
    capsys.readouterr()
    assert autograde.main(_args(course, "--jobs", "2")) == 0
    assert "0 to grade, 3 already graded" in capsys.readouterr().err
    assert _markers(course) == before and _gradebook(course) == ours
    assert autograde.main(_args(course, "--student", "nobody")) == 2
    assert autograde.main(_args(course, "--jobs", "0")) == 2
    p = argparse.ArgumentParser()
    autograde.add_arguments(p)
    # an assignment the gradebook lacks (never generated here) is recorded from source/, then: nobody submitted it
    capsys.readouterr()
    assert autograde.main(p.parse_args(["attention_lm", "--course-dir", str(course)])) == 2
    err = capsys.readouterr().err
    assert "attention_lm: RecordInGradebook" in err and "no submissions for 'attention_lm'" in err, err

    # --force regrades (one student here): same record, run to run
    assert autograde.main(_args(course, "--force", "--student", "cy", "--jobs", "1")) == 0
    assert _markers(course)["cy"] != before["cy"] and _markers(course)["ada"] == before["ada"]
    assert _gradebook(course) == ours


def _more_students(course, names) -> list[str]:
    """Correct submissions under the names given (handed out after the demo's students: names sort later)."""
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    cell(nb, "head").source = solution_source(A, "head")
    for name in names:
        (course / "submitted" / name / A).mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / name / A / f"{A}.ipynb")
    return names


# A step the test puts first in the course's autograde pipeline (through the course's nbgrader_config.py,
# as any course configures its pipeline): at the student given it says so (a file in the folder given) and
# holds that worker there until the worker is ended. The test interrupts at that moment, so which students
# are finished, in flight or untouched is known: no race with grading speed.
HOLD_STEP = """
import os as _os, time as _time
from nbgrader.preprocessors import NbGraderPreprocessor as _Step

class HoldAtStudent(_Step):
    def preprocess(self, nb, resources):
        student = resources["nbgrader"]["student"]
        if student == {student!r}:
            open(_os.path.join({folder!r}, student), "w").close()
            while True:
                _time.sleep(1)
        return nb, resources

c.Autograde.autograde_preprocessors = [HoldAtStudent, *c.Autograde.autograde_preprocessors]
"""


def _hold_at(course, config: str, student: str, folder: Path) -> None:
    """The course's configuration ``config`` plus HOLD_STEP holding the worker that reaches ``student``."""
    (course / "nbgrader_config.py").write_text(config + HOLD_STEP.format(student=student, folder=str(folder)))


def test_interrupted_runs_resume_without_losing_or_regrading(released, tmp_path):
    course = released
    students = _class(course, keep=["ada", "ben", "cy", "eve"]) + _more_students(course, ["zz1", "zz2", "zz3"])
    config = (course / "nbgrader_config.py").read_text()
    held = tmp_path / "held"
    held.mkdir()
    state = course / autograde.STATE_DIR / A
    # one worker takes the students in order: holding it at zz1 means ada..eve are finished and zz1 is in flight
    before_zz1 = [s for s in students if s < "zz1"]

    # 1. Ctrl-C (SIGINT to the whole foreground group) while zz1 is being graded
    log1 = tmp_path / "run1.log"
    _hold_at(course, config, "zz1", held)
    run = _start(course, log1)
    _wait_for(lambda: (held / "zz1").exists() or run.poll() is not None, 600, "the run to reach zz1")
    assert run.poll() is None, log1.read_text()[-3000:]
    workers = _worker_pids(log1)
    tree = set(workers) | {d for w in workers for d in _descendants(w)}
    os.killpg(run.pid, signal.SIGINT)
    assert run.wait(timeout=120) == 130, log1.read_text()[-3000:]
    assert "interrupted" in log1.read_text()
    assert workers and not [p for p in tree if _alive(p)], "workers or judge children outlived the interrupt"
    assert not _scratch_left(workers)
    after_int = _markers(course)
    assert sorted(after_int) == before_zz1, "the interrupt lost a finished student or recorded the one in flight"

    # 2. the next run skips them; SIGKILL its parent (only) while it grades zz2, after zz1 is recorded
    log2 = tmp_path / "run2.log"
    _hold_at(course, config, "zz2", held)
    run = _start(course, log2)
    _wait_for(lambda: (held / "zz2").exists() or run.poll() is not None, 600, "the run to reach zz2")
    assert run.poll() is None, log2.read_text()[-3000:]
    workers = _worker_pids(log2)
    tree = set(workers) | {d for w in workers for d in _descendants(w)}
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=60)
    assert f"{len(students) - len(after_int)} to grade, {len(after_int)} already graded" in log2.read_text()
    # the worker, held in zz2's pipeline, gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and must end there
    _wait_for(lambda: not [p for p in tree if _alive(p)], 120, "the killed run's workers and judge children to end")
    after_kill = _markers(course)
    assert sorted(after_kill) == before_zz1 + ["zz1"], "the killed run's worker recorded the student in flight"
    assert not _scratch_left(workers)
    assert all(after_kill[s] == after_int[s] for s in after_int), "a finished student was graded again"

    # 3. the last run grades exactly the rest, and the record is whole
    (course / "nbgrader_config.py").write_text(config)
    assert autograde.main(_args(course, "--jobs", "2")) == 0
    final = _markers(course)
    assert sorted(final) == students
    assert all(final[s] == after_kill[s] for s in after_kill), "a finished student was graded again"
    last = json.loads((state / "last_run.json").read_text())
    assert last["graded"] == ["zz2", "zz3"] and last["skipped"] == sorted(after_kill)
    assert not list(state.glob(".*.tmp"))
    book = _gradebook(course)
    assert sorted(book) == students
    cells = {c.id: c.cell for c in CHECKS}
    for s in students:
        result = json.loads(final[s][1])["results"][A]
        assert {cells[c["id"]]: c["points"] for c in result["checks"]} == \
               {k[1]: v[0] for k, v in book[s].items() if k[1] in cells.values()}, s
        assert book[s]["score"] == result["score"]
        nbformat.read(course / "autograded" / s / A / f"{A}.ipynb", as_version=4)
    assert book["ada"]["score"] == book["eve"]["score"] == book["zz3"]["score"] == 20 and book["ben"]["score"] == 0


def test_a_hanging_submission_does_not_stall_the_others(released, monkeypatch):
    course = released
    load = config.load                      # the pool's workers are forked from this process: they read it too
    monkeypatch.setattr(config, "load", lambda a: dataclasses.replace(
        load(a), limits=dataclasses.replace(load(a).limits, wall_seconds=WALL)))
    students = _class(course, keep=["ada", "cy"])
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    forward = "    def forward(self, x):                                       # x: (B, T, d)\n"
    src = solution_source(A, "head")
    assert forward in src
    # hangs without burning a core (the limits are wall-clock ones; a busy loop is tests/test_hostile.py's), so a
    # test running beside this one keeps its share of the machine
    cell(nb, "head").source = src.replace(forward, forward + "        import time\n        time.sleep(3600)\n")
    (course / "submitted" / "aa_hang" / A).mkdir(parents=True)       # sorts first: handed out first
    nbformat.write(nb, course / "submitted" / "aa_hang" / A / f"{A}.ipynb")

    assert autograde.main(_args(course, "--jobs", "2")) == 0
    ended = time.time()
    markers = {s: json.loads(text) for s, (_, text) in _markers(course).items()}
    assert sorted(markers) == sorted(students + ["aa_hang"])
    hang = markers["aa_hang"]
    assert hang["seconds"] >= 0.8 * WALL                                # it really hung, until its own limit ...
    assert hang["seconds"] < WALL + 15                                  # ... and no longer
    assert any("took longer" in c["message"] for c in hang["results"][A]["checks"])
    for s in students:                                                  # the others finished meanwhile
        assert markers[s]["graded_at"] < hang["graded_at"], s
    # the run ends once the hung submission is recorded (measured from then: start-up under load is not its business)
    assert ended - hang["graded_at"] < 20
    assert markers["ada"]["score"] == 20 and markers["cy"]["score"] < 20


def test_the_compiled_metadata_check_agrees_with_nbgraders_own():
    """attnkit autograde's faster CheckCellMetadata accepts and rejects exactly what nbgrader's does."""
    import copy

    from nbgrader.nbgraderformat import ValidationError
    from nbgrader.nbgraderformat.common import SchemaMismatchError
    from nbgrader.preprocessors import CheckCellMetadata

    from attnkit.nbgrader_ext.steps import CheckCellMetadataCompiled
    nb = nbformat.read(KIT_ROOT / "release" / A / f"{A}.ipynb", as_version=4)
    graded = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade"))
    broken = {"points": "ten", "extra": lambda m: m.update(surprise=1), "grade_id": None,
              "schema": lambda m: m.update(schema_version=1), "solution": "yes"}
    for what, change in [(None, None), *broken.items()]:
        case = copy.deepcopy(nb)
        meta = next(c for c in case.cells if c.metadata.get("nbgrader", {}).get("grade_id") ==
                    graded.metadata.nbgrader.grade_id).metadata.nbgrader
        if callable(change):
            change(meta)
        elif what is not None:
            meta[what] = change
        outcomes = []
        for step in (CheckCellMetadata, CheckCellMetadataCompiled):
            try:
                step().preprocess(copy.deepcopy(case), {})
                outcomes.append("valid")
            except (ValidationError, SchemaMismatchError) as e:
                outcomes.append(f"{type(e).__name__}: {e}")
        assert outcomes[0] == outcomes[1], (what, outcomes)
        assert (outcomes[0] == "valid") == (what is None), (what, outcomes)


def test_a_forced_regrade_reads_the_tas_grade_of_the_written_answer(released, capsys):
    """After a TA graded ada's written answer in formgrader, `attnkit autograde --force` shows that grade, not
    "awaits a TA" (nbgrader flags the answer for review on a regrade, but keeps the TA's score); cy's answer,
    ungraded, still awaits one."""
    course = released
    _class(course, keep=["ada", "cy"])
    assert autograde.main(_args(course, "--jobs", "1")) == 0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.find_grade("written_trap", A, A, "ada").manual_score = 1.5
        gb.find_grade("written_trap", A, A, "ada").needs_manual_grade = False   # as formgrader leaves it
        gb.db.commit()
    capsys.readouterr()
    assert autograde.main(_args(course, "--force", "--jobs", "1")) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith(("ada ", "cy "))}
    assert "[written answer: 1.5 / 2 from a TA]" in rows["ada"] and "awaits" not in rows["ada"], rows
    assert "[written answer awaits a TA]" in rows["cy"], rows
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.find_grade("written_trap", A, A, "ada").manual_score == 1.5          # the regrade kept it
