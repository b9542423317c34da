"""`attnkit autograde ASSIGNMENT`: grade a whole class with nbgrader's own pipeline, in parallel, resumably.

Each submission goes through nbgrader's own `Autograde` converter, configured exactly as
`nbgrader autograde` configures it (the course root's nbgrader_config.py), so the gradebook,
`autograded/`, `nbgrader export`, formgrader and manual grading see what `nbgrader autograde`
would have recorded. What differs:

- **Start-up paid for once.** N worker processes are forked from a parent that has already
  imported nbgrader, torch and the kit; each grades one student at a time. The judge's fork
  server (autograder/zygote.py) is started first, so its imports overlap the parent's, and is
  shared by the workers: every submission still gets its own confined child, forked warm.
  nbgrader's cell-metadata check is swapped for the same check with its schema compiled once
  (nbgrader_steps.CheckCellMetadataCompiled).
- **No kernel run by default.** Grades never depend on the student's kernel run
  (`SandboxedExecute`): the judge writes every test cell's verdict. So the kernel step is left
  out unless `--execute` is given (then the autograded notebook and the feedback also show the
  outputs of the student's cells). It is kept anyway when a code grade cell exists that the
  judge does not grade, or the pipeline has no `JudgeGradeCells`: without a kernel such a cell
  would get full marks.
- **Resumable.** After a student's grades are committed to the gradebook, a completion marker
  `.attnkit/autograde/<assignment>/<student>.json` is written atomically (temporary file +
  `os.replace`) holding the score, the judge's per-check result and a fingerprint of the
  submitted files. A rerun skips students whose marker matches their submission and the
  gradebook (unless `--force`), and regrades everyone else with nbgrader's `--force`
  semantics (their partial `autograded/` folder is replaced). SQLite commits are atomic, so an
  interrupted run leaves at worst a student without a marker, who is graded again.
  (The marker lives outside `autograded/` because `generate_feedback` copies every file of
  `autograded/<student>/<assignment>/` into the student's feedback.)
- **A per-check CSV**, `autograded/<assignment>-checks.csv`, one row per student per check,
  rewritten atomically at the end of every run from the gradebook and the markers.

Ctrl-C or SIGTERM: workers are stopped (their judge children killed, their scratch directories
removed), the CSV is rewritten from what finished, exit status 130. SIGKILL of the parent: each
worker gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and ends the same way. A worker that dies
is replaced and its student reported as failed (graded again by the next run); one that outlives
the judge's own limits by WATCHDOG_GRACE seconds is ended. One run per course and assignment
(a lock the workers inherit, so a new run also waits for a killed run's last workers). The
workers' gradebook connections wait up to SQLITE_BUSY_SECONDS for SQLite's write lock, and a
student whose grading still met 'database is locked' is graded again.

Exit status: 0 when grading completed (whatever the scores), 1 when some submission could not be
graded (nbgrader failed on it, or its worker died), 2 for bad usage, 130 when interrupted.
"""
from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import importlib
import io
import json
import logging
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .gradebook import Location

STATE_DIR = Path(".attnkit") / "autograde"
LOCK_RETRIES = 4                # a student's conversion is retried when SQLite reported 'database is locked'
SQLITE_BUSY_SECONDS = 120       # busy timeout of every gradebook connection the workers open
LOCK_PATIENCE = 30              # seconds a run waits for another run (or a killed run's last workers) to end
WATCHDOG_GRACE = 300            # seconds beyond the judge's (and kernel's) own limits before a worker is ended


# ----------------------------------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("assignment", help="assignment id, e.g. causal_head")
    parser.add_argument("--jobs", "-j", type=int, default=None,
                        help="parallel workers (default: the number of cores this process may use)")
    parser.add_argument("--student", action="append", default=None, metavar="ID",
                        help="grade only this student (repeatable)")
    parser.add_argument("--force", action="store_true",
                        help="regrade students already graded (default: skip them)")
    parser.add_argument("--execute", action="store_true",
                        help="also run each notebook in the sandboxed kernel, as nbgrader autograde does "
                             "(slower; grades are the same, the autograded notebooks and feedback then show "
                             "the outputs of the student's cells)")
    parser.add_argument("--course-dir", default=".", help="the nbgrader course root (default: current directory)")


def main(args) -> int:
    """Run `attnkit autograde`. 0: grading completed (whatever the scores); 1: some submissions could
    not be graded (nbgrader or the kit failed on them); 2: bad usage; 130: interrupted."""
    try:
        run = _prepare(args)
    except UsageError as e:
        print(f"attnkit autograde: {e}", file=sys.stderr)
        return 2
    return run.execute()


class UsageError(Exception):
    pass


# ----------------------------------------------------------------------------------------- small helpers

def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _fingerprint(folder: Path) -> str:
    """What was handed in: every file's relative path and bytes.

    The folder is the student's: links are hashed as their target's name (never followed), FIFOs,
    sockets and devices as their kind (never opened), and a file is read at most to safe_copy's
    notebook cap (a larger file is refused for grading anyway), so no entry can make this hang or read
    without end.
    """
    import stat as st_

    from . import safe_copy
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):          # os.walk does not descend into links
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            try:
                mode = os.lstat(p).st_mode
                if st_.S_ISLNK(mode):
                    h.update(b"<link>" + os.fsencode(os.readlink(p)))
                elif not st_.S_ISREG(mode):
                    h.update(f"<{safe_copy.kind(mode)}>".encode())
                else:
                    fd, _ = safe_copy.open_regular(p, max_bytes=1 << 62)
                    try:
                        left = safe_copy.MAX_NOTEBOOK_BYTES + 1
                        while left > 0:
                            block = os.read(fd, min(1 << 20, left))
                            if not block:
                                break
                            h.update(block)
                            left -= len(block)
                    finally:
                        os.close(fd)
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
    return h.hexdigest()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _with_busy_timeout(db_url: str) -> str:
    if not db_url.startswith("sqlite:") or "timeout=" in db_url:
        return db_url
    return db_url + ("&" if "?" in db_url else "?") + f"timeout={SQLITE_BUSY_SECONDS}"


def _set_pdeathsig(sig: int) -> None:
    """Linux: have the kernel send ``sig`` to this process when its parent dies."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)            # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the worker notices the closed pipe instead
        pass


# ----------------------------------------------------------------------------------------- the course

@dataclass
class Context:
    """Everything a worker needs; built in the parent before forking, inherited by the workers."""
    root: Path
    assignment: str
    app: object                       # an initialized nbgrader AutogradeApp (its config, its CourseDirectory)
    preprocessors: list               # the autograde_preprocessors the workers use
    sanitize: list                    # the sanitize_preprocessors the workers use
    execute: bool
    execute_note: str
    limits: object | None             # autograder.sandbox.Limits override (tests), else the assignment's own
    judge_wall: float | None          # the judge's wall-clock limit per submission, when it is an attnkit assignment
    checks: list                      # [(check id, grade cell, title, points)] or [] for a non-attnkit assignment
    gradebook: Location               # the course's gradebook, where its nbgrader configuration keeps it
    create_students: bool             # Autograde.create_student of the course's configuration

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR / self.assignment

    def marker(self, student: str) -> Path:
        return self.state / f"{student}.json"

    def log_path(self, student: str) -> Path:
        return self.state / f"{student}.log"

    def submitted(self, student: str) -> Path:
        cd = self.app.coursedir
        return Path(cd.format_path(cd.submitted_directory, student, self.assignment))

    def autograded(self, student: str) -> Path:
        cd = self.app.coursedir
        return Path(cd.format_path(cd.autograded_directory, student, self.assignment))

    @property
    def csv_path(self) -> Path:
        cd = self.app.coursedir
        return Path(cd.format_path(cd.autograded_directory, ".", ".")).resolve() / f"{self.assignment}-checks.csv"


def _load_app(root: Path):
    """nbgrader's AutogradeApp with the course's configuration, loaded as `nbgrader autograde` run in ``root`` would."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    from . import gradebook
    try:
        return gradebook.load_app(root, AutogradeApp)
    except gradebook.CourseConfigError as e:
        raise UsageError(str(e)) from None


def _discover(ctx_app, assignment: str) -> list[str]:
    """Students with a notebook under submitted/<student>/<assignment>/, as nbgrader's converter finds them."""
    cd = ctx_app.coursedir
    pattern = cd.format_path(cd.submitted_directory, "*", assignment)
    regexp = cd.format_path(cd.submitted_directory, "(?P<student_id>.*)", re.escape(assignment), escape=True)
    exclude = set(cd.student_id_exclude.split(",")) if cd.student_id_exclude else set()
    students = []
    for folder in sorted(glob.glob(pattern)):
        m = re.match(regexp, folder)
        if not m or not os.path.isdir(folder):
            continue
        if not glob.glob(os.path.join(folder, cd.notebook_id + ".ipynb")):
            continue
        sid = m.group("student_id")
        if sid not in exclude:
            students.append(sid)
    return sorted(set(students))


def _resolve(item):
    if isinstance(item, str):
        from traitlets.utils.importstring import import_item
        return import_item(item)
    return item


def _recording(judge_cls):
    """``judge_cls`` (JudgeGradeCells or a subclass), also keeping the judge's result for the marker and the CSV."""
    def preprocess(self, nb, resources):
        nb, resources = judge_cls.preprocess(self, nb, resources)
        result = resources.get("attnkit_result") or nb.metadata.get("attnkit")
        if result:                        # what the marker and the CSV need (not the attention picture)
            result = {k: result.get(k) for k in ("assignment", "score", "max_score", "error", "checks")}
        _WORKER.results[resources["nbgrader"]["notebook"]] = result
        return nb, resources
    return type(judge_cls.__name__, (judge_cls,), {"preprocess": preprocess, "__module__": judge_cls.__module__})


def _pipeline(app, assignment: str, execute: bool, code_cells: set[str], judged_cells: set[str]):
    """The course's autograde preprocessors; the kernel step dropped when grades cannot depend on it."""
    from nbconvert.preprocessors import ExecutePreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    from .nbgrader_steps import JudgeGradeCells, SandboxedExecute
    items = [_resolve(p) for p in Autograde(coursedir=app.coursedir, parent=app).autograde_preprocessors]
    kernel = (SandboxedExecute, Execute, ExecutePreprocessor)

    def is_kernel(p):
        return isinstance(p, type) and issubclass(p, kernel)

    has_judge = any(isinstance(p, type) and issubclass(p, JudgeGradeCells) for p in items)
    if execute:
        note = "the student's kernel runs (--execute)"
    elif not any(is_kernel(p) for p in items):
        note = "the course's pipeline runs no kernel"
    elif not has_judge or not judged_cells:
        execute, note = True, "kernel kept: the judge does not grade this assignment"
    elif code_cells - judged_cells:
        execute, note = True, ("kernel kept: code grade cells the judge does not grade: "
                               + ", ".join(sorted(code_cells - judged_cells)))
    else:
        note = "no kernel run (grades come from the judge; --execute to run it)"
    out = []
    for p in _compiled_metadata_check(items):
        if is_kernel(p) and not execute:
            continue
        out.append(_recording(p) if isinstance(p, type) and issubclass(p, JudgeGradeCells) else p)
    return out, execute, note


def _compiled_metadata_check(items: list) -> list:
    """nbgrader's own CheckCellMetadata swapped for the same check with its schema compiled once."""
    from nbgrader.preprocessors import CheckCellMetadata

    from .nbgrader_steps import CheckCellMetadataCompiled
    return [CheckCellMetadataCompiled if p is CheckCellMetadata else p for p in map(_resolve, items)]


def _prepare(args) -> "Run":
    jobs = args.jobs if args.jobs is not None else _cores()
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    root = Path(args.course_dir).resolve()
    if not root.is_dir():
        raise UsageError(f"no such course directory: {root}")
    from autograder import sandbox
    drive = Path(sandbox.HERE, args.assignment, "drive.py")
    warm = sandbox.prestart(drive) if drive.is_file() else None   # its imports overlap ours
    # Everything a worker needs is imported here, once, before the workers are forked.
    import torch  # noqa: F401
    from nbgrader.api import MissingEntry
    from nbgrader.converters import Autograde

    from autograder import config as judge_config, judge, sandbox  # noqa: F401
    from . import course, gradebook, nbgrader_steps, safe_copy  # noqa: F401

    # The workers grade with nbgrader's Autograde converter: its copy of each submission folder and its
    # reading of the notebook must not follow links, whatever configuration the course has (the kit's
    # grading_config/nbgrader_config.py installs the same; installing twice is a no-op).
    safe_copy.install_nbgrader()
    app = _load_app(root)
    cd = app.coursedir
    where = gradebook.from_coursedir(cd)
    if not course.gradebook_knows(where.url, where.course_id, args.assignment):   # a new course, e.g. a fresh clone
        if not (root / "source" / args.assignment).is_dir():
            raise UsageError(f"assignment {args.assignment!r} is not in the gradebook {where}, and "
                             f"there is no source/{args.assignment}/ to record it from")
        try:
            course.record_in_gradebook(root, [args.assignment], log=lambda m: print(m, file=sys.stderr))
        except RuntimeError as e:
            raise UsageError(f"could not record {args.assignment!r} in the gradebook: {e}") from None
    code_cells = set()
    with gradebook.opened(where) as gb:        # it exists: recorded above
        try:
            a = gb.find_assignment(args.assignment)
        except MissingEntry:
            raise UsageError(f"assignment {args.assignment!r} is not in the gradebook {where}") from None
        for nb in a.notebooks:
            code_cells |= {g.name for g in nb.grade_cells if g.cell_type == "code"}
    try:
        cfg = judge_config.load(args.assignment)
        checks = [(c.id, c.cell, c.title, c.points) for c in cfg.checks]
        judge_wall = (getattr(args, "limits", None) or cfg.limits).wall_seconds
        importlib.import_module(f"autograder.{args.assignment}")       # its checks, imported once before forking
    except KeyError:
        checks, judge_wall = [], None
    students = _discover(app, args.assignment)
    if not students:
        raise UsageError(f"no submissions for {args.assignment!r} under "
                         f"{cd.format_path(cd.submitted_directory, '*', args.assignment)}")
    selection = students
    if args.student:
        unknown = sorted(set(args.student) - set(students))
        if unknown:
            raise UsageError(f"no submission of {args.assignment!r} for: {', '.join(unknown)}")
        selection = sorted(set(args.student))
    preprocessors, execute, note = _pipeline(app, args.assignment, args.execute, code_cells,
                                             {c[1] for c in checks})
    sandbox.namespaces_available()        # probed once here, inherited by every worker
    if warm is not None:
        try:
            warm.ensure_ready()               # ready before forking: every worker forks submissions from it
        except sandbox.zygote.ZygoteGone:
            pass                              # each worker starts its own, or a fresh child per submission
    course_autograde = Autograde(coursedir=cd, parent=app)      # the course's configuration of the converter
    ctx = Context(root=root, assignment=args.assignment, app=app, preprocessors=preprocessors,
                  sanitize=_compiled_metadata_check(course_autograde.sanitize_preprocessors), execute=execute,
                  execute_note=note, limits=getattr(args, "limits", None), judge_wall=judge_wall, checks=checks,
                  gradebook=where, create_students=course_autograde.create_student)
    return Run(ctx, students, selection, jobs=jobs, force=args.force)


# ----------------------------------------------------------------------------------------- markers

def _read_marker(ctx: Context, student: str) -> dict | None:
    try:
        data = json.loads(ctx.marker(student).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("student") == student else None


def _gradebook_grades(ctx: Context) -> dict[str, dict[tuple[str, str], dict]]:
    """student -> {(notebook, grade cell): grade fields} for this assignment.

    One query (walking nbgrader's objects loads each grade lazily: about 0.3 s per class of 50 here).
    """
    from nbgrader.api import Assignment, BaseCell, Grade, Notebook, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy import select

    from .gradebook import opened
    query = (select(SubmittedAssignment.student_id, Notebook.name, BaseCell.name, Grade.auto_score,
                    Grade.manual_score, Grade.max_score, Grade.cell_type, Grade.needs_manual_grade)
             .select_from(Grade)
             .join(BaseCell, Grade.cell_id == BaseCell.id)
             .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
             .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
             .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
             .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
             .where(Assignment.name == ctx.assignment))          # as Gradebook.assignment_submissions
    out: dict[str, dict] = {}
    with opened(ctx.gradebook) as gb:
        for student, nb, cell, auto, manual, max_score, cell_type, needs in gb.db.execute(query):
            out.setdefault(student, {})[(nb, cell)] = {
                "auto_score": auto, "manual_score": manual, "max_score": max_score, "cell_type": cell_type,
                "needs_manual_grade": needs}
    return out


def _create_students(ctx: Context, students: list[str]) -> None:
    """Enter new students in the gradebook in sorted order, as sequential `nbgrader autograde` would
    (its export lists students in that order), before the workers finish in whatever order."""
    from nbgrader.api import MissingEntry

    from .gradebook import opened
    with opened(ctx.gradebook) as gb:
        for s in sorted(students):
            try:
                gb.find_student(s)
            except MissingEntry:
                gb.add_student(s)


def _marker_valid(ctx: Context, student: str, marker: dict | None, grades: dict) -> str | None:
    """None if ``student`` is fully graded as the marker says; otherwise why not."""
    if marker is None:
        return "not graded yet"
    if marker.get("fingerprint") != _fingerprint(ctx.submitted(student)):
        return "resubmitted since it was graded"
    mine = grades.get(student)
    if mine is None:
        return "missing from the gradebook"
    for nb_name in marker.get("notebooks", []):
        if not (ctx.autograded(student) / f"{nb_name}.ipynb").is_file():
            return "autograded notebook missing"
    cells = {c[0]: c[1] for c in ctx.checks}
    for nb_name, result in (marker.get("results") or {}).items():
        for check in (result or {}).get("checks", []):
            g = mine.get((nb_name, cells.get(check["id"])))
            if g is None or g["auto_score"] is None or float(g["auto_score"]) != float(check["points"]):
                return "gradebook disagrees with the marker"
    return None


# ----------------------------------------------------------------------------------------- the worker

@dataclass
class _WorkerState:
    ctx: Context | None = None
    results: dict = field(default_factory=dict)


_WORKER = _WorkerState()


class _Collect(logging.Handler):
    """The converter's log for one student: to the student's log file, errors also kept for the summary."""

    def __init__(self, path: Path):
        super().__init__(logging.DEBUG)
        self.stream = open(path, "w", encoding="utf-8")
        self.errors: list[str] = []
        self.text = io.StringIO()
        self.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))

    def emit(self, record):
        try:
            line = self.format(record)
            self.stream.write(line + "\n")
            self.text.write(line + "\n")
            if record.levelno >= logging.ERROR:
                self.errors.append(record.getMessage())
        except Exception:  # noqa: BLE001
            pass

    def close(self):
        try:
            self.stream.close()
        finally:
            super().close()


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _worker_main(conn, ctx: Context, parent_pid: int, inherited: list) -> None:
    for c in inherited:                       # other workers' pipe ends, inherited through fork
        try:
            c.close()
        except OSError:
            pass
    _set_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent_pid:            # the parent died before the line above
        os._exit(3)
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _raise_exit)        # ... it ends us with SIGTERM: `finally` blocks kill judge children
    os.chdir(ctx.root)
    _share_gradebook_engines()
    _WORKER.ctx = ctx
    app = ctx.app
    app.coursedir.db_url = _with_busy_timeout(ctx.gradebook.url)
    for h in list(app.log.handlers):          # nbgrader's console log goes to each student's log file instead
        h.setLevel(logging.CRITICAL + 1)
    app.log.setLevel(logging.INFO)
    logging.captureWarnings(True)             # e.g. SQLAlchemy's warnings from nbgrader's gradebook: to the log file
    logging.getLogger("py.warnings").propagate = False
    if ctx.limits is not None:                # short limits for tests: the judge call JudgeGradeCells makes
        from autograder import judge
        original = judge.grade
        judge.grade = lambda nb, assignment, limits=None: original(nb, assignment, limits or ctx.limits)
    # The judge's (and the kernel's) scratch directories go under one directory per worker, removed
    # when the worker ends, even when it is ended half-way through a submission.
    scratch = Path(tempfile.mkdtemp(prefix=_scratch_prefix(os.getpid())))
    tempfile.tempdir = str(scratch)
    try:
        while True:
            try:
                student = conn.recv()
            except (EOFError, OSError):
                break
            if student is None:
                break
            conn.send(_grade_one(ctx, student))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _share_gradebook_engines() -> None:
    """One SQLAlchemy engine per database URL in this worker, for all of nbgrader's Gradebook objects.

    nbgrader opens a new engine for each of the nine or so Gradebook objects one submission needs,
    so every statement is compiled again each time (about 30 ms per submission here). Sharing the
    engine keeps its compiled-statement cache; the statements, the database and the transactions
    are nbgrader's own (Gradebook.close still disposes of the pooled connection).
    """
    import nbgrader.api
    import sqlalchemy
    engines = {}

    def shared_engine(url, **kwargs):
        key = (str(url), tuple(sorted(kwargs.items())))
        if key not in engines:
            engines[key] = sqlalchemy.create_engine(url, **kwargs)
        return engines[key]
    nbgrader.api.create_engine = shared_engine


def _scratch_prefix(pid: int) -> str:
    return f"attnkit-autograde-worker{pid}-"


def _remove_scratch(pid: int) -> None:
    """A worker killed outright (SIGKILL) cannot clean up after itself: its parent does."""
    for d in glob.glob(os.path.join(tempfile.gettempdir(), _scratch_prefix(pid) + "*")):
        shutil.rmtree(d, ignore_errors=True)


def _grade_one(ctx: Context, student: str) -> dict:
    from nbgrader.converters import Autograde, NbGraderException

    from autograder import sandbox
    t0 = time.monotonic()
    app = ctx.app
    ctx.state.mkdir(parents=True, exist_ok=True)
    try:
        ctx.marker(student).unlink()          # from now until the new marker, this student counts as not graded
    except FileNotFoundError:
        pass
    fingerprint = _fingerprint(ctx.submitted(student))
    notebooks = sorted(Path(p).stem for p in glob.glob(str(ctx.submitted(student) / (app.coursedir.notebook_id + ".ipynb"))))
    collect = _Collect(ctx.log_path(student))
    app.log.addHandler(collect)
    logging.getLogger("py.warnings").addHandler(collect)
    error = None
    attempts = 0
    try:
        for attempts in range(1, LOCK_RETRIES + 1):
            _WORKER.results.clear()
            collect.errors.clear()
            app.coursedir.assignment_id = ctx.assignment
            app.coursedir.student_id = student
            converter = Autograde(coursedir=app.coursedir, parent=app)
            converter.force = True            # nbgrader's --force: a partial autograded/ folder is replaced
            converter.autograde_preprocessors = list(ctx.preprocessors)
            converter.sanitize_preprocessors = list(ctx.sanitize)
            try:
                converter.start()
                error = None
                break
            except NbGraderException as e:
                error = "; ".join(dict.fromkeys(collect.errors[:3])) or str(e)
            except Exception as e:  # noqa: BLE001 - a fault on one submission must not stop the class
                error = f"{type(e).__name__}: {e}"
                app.log.error("%s", traceback.format_exc())
            if "database is locked" not in collect.text.getvalue() or attempts == LOCK_RETRIES:
                break
            app.log.warning("the gradebook was locked; grading %s again (attempt %d)", student, attempts + 1)
            time.sleep(attempts + random.random())
    finally:
        app.log.removeHandler(collect)
        logging.getLogger("py.warnings").removeHandler(collect)
        collect.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"student": student, "ok": error is None, "error": error, "seconds": time.monotonic() - t0,
           "pid": os.getpid(), "rss_kib": usage.ru_maxrss, "child_rss_kib": max(children.ru_maxrss, sandbox.peak_child_rss_kib),
           "attempts": attempts}
    if error is not None:
        return out
    results = {k: v for k, v in _WORKER.results.items() if v is not None}
    score = sum(r["score"] for r in results.values()) if results else None
    max_score = sum(r["max_score"] for r in results.values()) if results else None
    marker = {"student": student, "assignment": ctx.assignment, "fingerprint": fingerprint,
              "notebooks": notebooks, "score": score, "max_score": max_score, "execute": ctx.execute,
              "graded_at": time.time(), "seconds": out["seconds"], "worker_pid": os.getpid(),
              "results": results}
    _atomic_write(ctx.marker(student), json.dumps(marker, indent=1, sort_keys=True))
    out.update(score=score, max_score=max_score)
    return out


# ----------------------------------------------------------------------------------------- the parent

class _Progress:
    """A bar with count, rate and ETA on a terminal; one plain line per submission otherwise."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.stream = stream or sys.stderr
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.last = ""

    def _rate(self):
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed * 60 if self.done and elapsed > 0 else None
        eta = (self.total - self.done) / (rate / 60) if rate else None
        return rate, eta

    def _status(self):
        rate, eta = self._rate()
        return f"{'--' if rate is None else f'{rate:.1f}'}/min, ETA {_fmt_eta(eta)}"

    def tick(self):
        if self.tty:
            width = 24
            filled = int(width * self.done / max(1, self.total))
            line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  {self._status()}"
                    f"  {_fmt_eta(time.monotonic() - self.t0)} elapsed" + (f"  last: {self.last}" if self.last else ""))
            self.stream.write("\r" + line[:200] + "\x1b[K")
            self.stream.flush()

    def finished(self, text: str):
        self.done += 1
        self.last = text
        if self.tty:
            self.tick()
        else:
            self.stream.write(f"[{self.done}/{self.total}] {text}  ({self._status()})\n")
            self.stream.flush()

    def say(self, text: str):
        if self.tty:
            self.stream.write("\r\x1b[K" + text + "\n")
            self.tick()
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class _Worker:
    proc: object
    conn: object
    student: str | None = None
    started: float = 0.0
    graded: int = 0
    rss_kib: int = 0
    child_rss_kib: int = 0


class Run:
    def __init__(self, ctx: Context, students: list[str], selection: list[str], jobs: int, force: bool):
        self.ctx, self.students, self.selection, self.jobs, self.force = ctx, students, selection, jobs, force
        self.outcomes: dict[str, dict] = {}
        self.skipped: list[str] = []
        self.workers: list[_Worker] = []
        self.retired: list[_Worker] = []
        self.interrupted = False

    # -- scheduling

    def _spawn(self) -> _Worker:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=True)
        inherited = [w.conn for w in self.workers] + [parent_end]
        proc = ctx.Process(target=_worker_main, args=(child_end, self.ctx, os.getpid(), inherited),
                           name="attnkit-autograde-worker", daemon=False)
        proc.start()
        child_end.close()
        w = _Worker(proc=proc, conn=parent_end)
        self.workers.append(w)
        return w

    def _watchdog_seconds(self) -> float:
        budget = self.ctx.judge_wall or 600.0
        if self.ctx.execute:
            from .nbgrader_steps import SandboxedExecute
            try:
                budget += float(SandboxedExecute(parent=self.ctx.app).notebook_seconds)
            except Exception:  # noqa: BLE001
                budget += 600.0
        return budget + WATCHDOG_GRACE

    def _stop(self, w: _Worker, timeout: float = 10.0) -> None:
        if w.proc.is_alive():
            try:
                os.kill(w.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            w.proc.join(timeout)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5)
        if w.proc.exitcode is not None and w.proc.exitcode < 0:
            _remove_scratch(w.proc.pid)
        try:
            w.conn.close()
        except OSError:
            pass

    def _record(self, w: _Worker, out: dict, progress: _Progress) -> None:
        self.outcomes[out["student"]] = out
        w.graded += 1
        w.rss_kib = max(w.rss_kib, out.get("rss_kib", 0))
        w.child_rss_kib = max(w.child_rss_kib, out.get("child_rss_kib", 0))
        if out["ok"]:
            score = "" if out.get("score") is None else f"{out['score']:g}/{out['max_score']:g} "
            progress.finished(f"{out['student']}: {score}in {out['seconds']:.1f} s")
        else:
            log = self.ctx.log_path(out["student"]).relative_to(self.ctx.root)
            progress.finished(f"{out['student']}: FAILED ({out['error'][:160]}; log: {log})")

    def _loop(self, todo: list[str], progress: _Progress) -> None:
        from multiprocessing.connection import wait
        pending = deque(todo)
        limit = self._watchdog_seconds()
        for _ in range(min(self.jobs, len(pending))):
            self._spawn()
        progress.say(f"{len(self.workers)} worker(s), pids {', '.join(str(w.proc.pid) for w in self.workers)}")

        def retire(w: _Worker):
            self._stop(w)
            self.workers.remove(w)
            self.retired.append(w)

        def dispatch(w: _Worker):
            """Hand ``w`` its next student (or tell it to finish); a worker found dead is replaced."""
            while True:
                student = pending.popleft() if pending else None
                try:
                    w.conn.send(student)
                except OSError:
                    if student is None:
                        w.student = None
                        return
                    pending.appendleft(student)
                    retire(w)
                    w = self._spawn()
                    continue
                w.student, w.started = student, time.monotonic()
                return

        for w in list(self.workers):
            dispatch(w)
        while any(w.student is not None for w in self.workers):
            busy = [w for w in self.workers if w.student is not None]
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
            for w in busy:
                if w.conn in ready:
                    try:
                        out = w.conn.recv()
                    except (EOFError, OSError):
                        out = None
                    if out is not None:
                        self._record(w, out, progress)
                        dispatch(w)
                        continue
                overdue = time.monotonic() - w.started > limit
                if w.proc.sentinel in ready or not w.proc.is_alive() or overdue:
                    student, started = w.student, w.started
                    why = (f"grading took longer than {limit:.0f} s" if overdue and w.proc.is_alive()
                           else f"the worker process died (exit status {w.proc.exitcode})")
                    retire(w)
                    self._record(w, {"student": student, "ok": False, "error": why,
                                     "seconds": time.monotonic() - started}, progress)
                    if pending:
                        dispatch(self._spawn())
            progress.tick()
        for w in self.workers:
            w.proc.join(10)
            if w.proc.is_alive():
                self._stop(w)

    # -- the run

    def execute(self) -> int:
        lock = self._lock()
        if lock is None:
            print(f"attnkit autograde: another run is grading {self.ctx.assignment} in this course "
                  f"(lock {self.ctx.state / '.lock'})", file=sys.stderr)
            return 2
        try:
            return self._execute()
        finally:
            lock.close()

    def _lock(self, patience: float = LOCK_PATIENCE):
        """One run per course and assignment. The workers inherit the lock, so after the parent is
        killed a new run waits for them to be gone."""
        import fcntl
        self.ctx.state.mkdir(parents=True, exist_ok=True)
        f = open(self.ctx.state / ".lock", "a+")
        deadline = time.monotonic() + patience
        said = False
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return f
            except BlockingIOError:
                if time.monotonic() > deadline:
                    f.close()
                    return None
                if not said:
                    print("attnkit autograde: waiting for another run on this assignment to end", file=sys.stderr)
                    said = True
                time.sleep(0.2)

    def _execute(self) -> int:
        ctx = self.ctx
        t0 = time.monotonic()
        progress_stream = sys.stderr
        grades = _gradebook_grades(ctx)
        todo, reasons = [], {}
        for s in self.selection:
            why = "forced" if self.force else _marker_valid(ctx, s, _read_marker(ctx, s), grades)
            if why is None:
                self.skipped.append(s)
            else:
                todo.append(s)
                reasons[why] = reasons.get(why, 0) + 1
        if ctx.create_students:
            _create_students(ctx, todo)
        for stale in ctx.state.glob(".*.tmp") if ctx.state.is_dir() else []:
            stale.unlink(missing_ok=True)         # a temporary file of a run that was killed mid-write
        progress = _Progress(len(todo), progress_stream)
        why = ", ".join(f"{n} {r}" for r, n in reasons.items() if r != "not graded yet")
        progress.say(f"attnkit autograde {ctx.assignment}: {len(todo)} to grade"
                     + (f" ({why})" if why else "")
                     + f", {len(self.skipped)} already graded"
                     + (" (skipped; --force to regrade)" if self.skipped else "")
                     + f"; {ctx.execute_note}")
        main_thread = threading.current_thread() is threading.main_thread()
        previous = {}
        if main_thread:
            def _term(signum, frame):
                raise KeyboardInterrupt
            previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _term), signal.SIGINT: signal.getsignal(signal.SIGINT)}
        try:
            try:
                if todo:
                    self._loop(todo, progress)
            except KeyboardInterrupt:
                self.interrupted = True
            if main_thread:                   # what follows is short and must not be cut half-way
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for w in self.workers:
                self._stop(w)
            progress.close()
            seconds = time.monotonic() - t0
            grades = _gradebook_grades(ctx)
            rows = self._write_csv(grades)
            self._write_run_json(seconds, todo)
            self._summary(grades, rows, seconds, todo)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.interrupted:
            print(f"interrupted: {sum(1 for o in self.outcomes.values() if o['ok'])} graded in this run; "
                  f"run the same command again to grade the rest", file=sys.stderr)
            return 130
        return 1 if any(not o["ok"] for o in self.outcomes.values()) else 0

    # -- what it leaves behind

    def _write_csv(self, grades: dict) -> int:
        ctx = self.ctx
        cells = {c[0]: (c[1], c[2]) for c in ctx.checks}
        header = ["assignment", "student", "notebook", "check", "grade_cell", "title", "points", "max_points",
                  "passed", "message", "diagnosis"]
        buf = io.StringIO()
        out = csv.writer(buf)
        out.writerow(header)
        n = 0
        for student in self.students:
            marker = _read_marker(ctx, student)
            if marker is None or student not in grades:
                continue
            for nb_name, result in sorted((marker.get("results") or {}).items()):
                for check in result.get("checks", []):
                    cell, title = cells.get(check["id"], (None, check.get("title")))
                    g = grades[student].get((nb_name, cell))
                    points = g["auto_score"] if g is not None and g["auto_score"] is not None else check["points"]
                    out.writerow([ctx.assignment, student, nb_name, check["id"], cell or "", title,
                                  f"{float(points):g}", f"{float(check['max_points']):g}",
                                  "yes" if check["passed"] else "no",
                                  "" if check["passed"] else check.get("message") or "",
                                  check.get("diagnosis") or ""])
                    n += 1
        ctx.csv_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(ctx.csv_path, buf.getvalue())
        return n

    def _write_run_json(self, seconds: float, todo: list[str]) -> None:
        workers = self.retired + self.workers
        info = {"assignment": self.ctx.assignment, "jobs": self.jobs, "execute": self.ctx.execute,
                "to_grade": len(todo), "graded": sorted(s for s, o in self.outcomes.items() if o["ok"]),
                "failed": {s: o["error"] for s, o in self.outcomes.items() if not o["ok"]},
                "skipped": self.skipped, "seconds": seconds, "interrupted": self.interrupted,
                "workers": [{"pid": w.proc.pid, "graded": w.graded, "peak_rss_mib": round(w.rss_kib / 1024, 1),
                             "peak_judge_child_rss_mib": round(w.child_rss_kib / 1024, 1)} for w in workers]}
        _atomic_write(self.ctx.state / "last_run.json", json.dumps(info, indent=1))

    def _summary(self, grades: dict, csv_rows: int, seconds: float, todo: list[str]) -> None:
        ctx = self.ctx
        cells = {c[1]: c[0] for c in ctx.checks}
        lines = []
        width = max([len("student")] + [len(s) for s in self.selection])
        lines.append(f"{'student':<{width}}  {'score':>11}  {'status':<15}  failed checks")
        for s in self.selection:
            o = self.outcomes.get(s)
            status = ("graded" if o and o["ok"] else "FAILED" if o else
                      "already graded" if s in self.skipped else "not graded")
            g = grades.get(s, {})
            auto = [v for v in g.values() if v["cell_type"] == "code"]
            if auto and status != "FAILED" and status != "not graded":
                score = sum(v["auto_score"] or 0 for v in auto)
                top = sum(v["max_score"] for v in auto)
                order = {c[1]: i for i, c in enumerate(ctx.checks)}
                lost = [cells.get(k[1], k[1]) for k, v in sorted(g.items(), key=lambda kv: (order.get(kv[0][1], 1e9), kv[0]))
                        if v["cell_type"] == "code" and (v["auto_score"] or 0) < v["max_score"]]
                pending = any(v["needs_manual_grade"] for v in g.values())
                note = ", ".join(lost) + ("  [written answer awaits a TA]" if pending else "")
                lines.append(f"{s:<{width}}  {score:>5g} / {top:<3g}  {status:<15}  {note}")
            else:
                note = (o or {}).get("error") or ""
                lines.append(f"{s:<{width}}  {'-':>11}  {status:<15}  {note[:200]}")
        graded = sum(1 for o in self.outcomes.values() if o["ok"])
        failed = sum(1 for o in self.outcomes.values() if not o["ok"])
        rate = f", {graded / seconds * 60:.1f} submissions/min" if graded and seconds > 0 else ""
        lines.append("")
        lines.append(f"{graded} graded, {len(self.skipped)} already graded, {failed} failed"
                     + (f", {len(todo) - len(self.outcomes)} not reached (interrupted)" if self.interrupted else "")
                     + f" in {seconds:.1f} s with {min(self.jobs, len(todo))} worker(s){rate}")
        lines.append(f"gradebook: {ctx.gradebook}")
        lines.append(f"per-check CSV: {ctx.csv_path} ({csv_rows} rows)")
        print("\n".join(lines), flush=True)


def _cli(argv=None) -> int:
    p = argparse.ArgumentParser(prog="attnkit autograde", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return main(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(_cli())
