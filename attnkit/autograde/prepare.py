"""Before any worker exists: the course's nbgrader app, who handed in, and the pipeline the workers run.

Everything here runs once in the parent; the workers inherit its result (a Context) through fork, so
what is imported and probed here is paid for once, not once per worker.
"""
from __future__ import annotations

import glob
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from attnkit.gradebook import Location
from attnkit.autograde.markers import STATE_DIR
from attnkit.engine import registry


class UsageError(Exception):
    """Bad usage, said in one sentence: `attnkit autograde` prints it and exits with status 2."""


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

    @property
    def check_cells(self) -> dict[str, str]:
        """check id -> the grade cell carrying its points."""
        return {c[0]: c[1] for c in self.checks}


def cores() -> int:
    """The cores this process may run on (its affinity, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def load_app(root: Path):
    """nbgrader's AutogradeApp with the course's configuration, loaded as `nbgrader autograde` run in ``root`` would."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    from attnkit import gradebook
    try:
        return gradebook.load_app(root, AutogradeApp)
    except gradebook.CourseConfigError as e:
        raise UsageError(str(e)) from None


def discover(app, assignment: str) -> list[str]:
    """Students with a notebook under submitted/<student>/<assignment>/, as nbgrader's converter finds them."""
    cd = app.coursedir
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


def pipeline(app, execute: bool, code_cells: set[str], judged_cells: set[str]):
    """The course's autograde preprocessors; the kernel step dropped when grades cannot depend on it.

    Returns (preprocessors, whether the kernel runs, the note the run prints about it)."""
    from nbconvert.preprocessors import ExecutePreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    from attnkit.nbgrader_ext.steps import JudgeGradeCells, SandboxedExecute
    from attnkit.autograde.worker import recording
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
    for p in compiled_metadata_check(items):
        if is_kernel(p) and not execute:
            continue
        out.append(recording(p) if isinstance(p, type) and issubclass(p, JudgeGradeCells) else p)
    return out, execute, note


def compiled_metadata_check(items: list) -> list:
    """nbgrader's own CheckCellMetadata swapped for the same check with its schema compiled once."""
    from nbgrader.preprocessors import CheckCellMetadata

    from attnkit.nbgrader_ext.steps import CheckCellMetadataCompiled
    return [CheckCellMetadataCompiled if p is CheckCellMetadata else p for p in map(_resolve, items)]


def prepare(args):
    """The Run that `attnkit autograde` with these arguments performs; UsageError when it cannot be done."""
    from attnkit.autograde.run import Run
    jobs = args.jobs if args.jobs is not None else cores()
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if getattr(args, "scheduler", None) and args.scheduler != "local":     # said before anything is loaded
        from attnkit.autograde import cluster
        try:
            cluster.check_address(args.scheduler, getattr(args, "insecure_scheduler", False))
        except cluster.SchedulerRefused as e:
            raise UsageError(str(e)) from None
    root = Path(args.course_dir).resolve()
    if not root.is_dir():
        raise UsageError(f"no such course directory: {root}")
    try:
        registry.use_course(root)
    except registry.NotACourse as e:
        raise UsageError(str(e)) from None
    from attnkit.engine import config as judge_config
    from attnkit.isolation import sandbox
    try:
        known = registry.get(args.assignment)
    except KeyError:                                    # said below, once the gradebook has been asked
        known = None
    # the fork server's imports overlap ours
    warm = sandbox.prestart(known.driver, judge_config.load(known.name).contract) if known else None
    # Everything a worker needs is imported here, once, before the workers are forked.
    import torch  # noqa: F401
    from nbgrader.api import MissingEntry
    from nbgrader.converters import Autograde

    from attnkit.engine import config as judge_config, judge
    from attnkit.isolation import sandbox  # noqa: F401
    from attnkit import course, gradebook
    from attnkit.nbgrader_ext import steps  # noqa: F401
    from attnkit.nbgrader_ext import patch

    # The workers grade with nbgrader's Autograde converter: its copy of each submission folder and its
    # reading of the notebook must not follow links, whatever configuration the course has (the kit's
    # grading_config/nbgrader_config.py installs the same; installing twice is a no-op).
    patch.install()
    app = load_app(root)
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
        judge_wall = cfg.limits.wall_seconds
        known.plugin()                                  # its checks, imported once before forking
    except KeyError:
        checks, judge_wall = [], None
    students = discover(app, args.assignment)
    if not students:
        raise UsageError(f"no submissions for {args.assignment!r} under "
                         f"{cd.format_path(cd.submitted_directory, '*', args.assignment)}")
    selection = students
    if args.student:
        unknown = sorted(set(args.student) - set(students))
        if unknown:
            raise UsageError(f"no submission of {args.assignment!r} for: {', '.join(unknown)}")
        selection = sorted(set(args.student))
    preprocessors, execute, note = pipeline(app, args.execute, code_cells, {c[1] for c in checks})
    sandbox.namespaces_available()        # probed once here, inherited by every worker
    if warm is not None:
        try:
            warm.ensure_ready()               # ready before forking: every worker forks submissions from it
        except sandbox.zygote.ZygoteGone:
            pass                              # each worker starts its own, or a fresh child per submission
    course_autograde = Autograde(coursedir=cd, parent=app)      # the course's configuration of the converter
    ctx = Context(root=root, assignment=args.assignment, app=app, preprocessors=preprocessors,
                  sanitize=compiled_metadata_check(course_autograde.sanitize_preprocessors), execute=execute,
                  execute_note=note, judge_wall=judge_wall, checks=checks, gradebook=where,
                  create_students=course_autograde.create_student)
    run = Run(ctx, students, selection, jobs=jobs, force=args.force)
    address = getattr(args, "scheduler", None) or cluster_address(app)
    if address and address != "local":
        from attnkit.autograde import cluster
        from attnkit.autograde.cluster_pool import ClusterPool
        from attnkit.autograde.run import watchdog_seconds
        try:
            address = cluster.check_address(address, getattr(args, "insecure_scheduler", False))
        except cluster.SchedulerRefused as e:
            raise UsageError(str(e)) from None
        run.pool = ClusterPool(ctx, address, watchdog_seconds(ctx), worker_course(app, root))
    return run


def worker_course(app, root: Path) -> str:
    """Where a worker finds this course's hidden autograders (``c.AttnkitCluster.worker_course_dir``): by default
    the course's own path, as on a cluster whose nodes share its file system; a worker checks that its copy's
    code is the instructor's (cluster.kit_fingerprint) before it judges anything."""
    section = app.config.get("AttnkitCluster") if hasattr(app, "config") else None
    found = section.get("worker_course_dir") if section is not None else None
    return str(found) if found else str(root)


def cluster_address(app) -> str | None:
    """The course's own Dask scheduler (``c.AttnkitCluster.scheduler`` in its nbgrader configuration), or None."""
    section = app.config.get("AttnkitCluster") if hasattr(app, "config") else None
    return str(section.get("scheduler")) if section is not None and section.get("scheduler") else None
