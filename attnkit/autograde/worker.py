"""One worker process's job: grade a student with nbgrader's own Autograde converter, then write the marker.

``start(ctx)`` runs once in each forked worker and returns the function the pool calls per student.
"""
from __future__ import annotations

import glob
import io
import logging
import os
import random
import resource
import time
import traceback
from pathlib import Path

from attnkit.autograde import markers

LOCK_RETRIES = 4                # a student's conversion is retried when SQLite reported 'database is locked'
SQLITE_BUSY_SECONDS = 120       # busy timeout of every gradebook connection the workers open

# The judge's result per notebook of the submission being graded, kept by the recording judge step
# (recording below) for the marker and the CSV: the step runs inside nbgrader's converter, which
# returns nothing of it.
_results: dict = {}


def recording(judge_cls):
    """``judge_cls`` (JudgeGradeCells or a subclass), also keeping the judge's result for the marker and the CSV."""
    def preprocess(self, nb, resources):
        nb, resources = judge_cls.preprocess(self, nb, resources)
        result = nb.metadata.get("attnkit")
        if result:                        # what the marker and the CSV need (not the attention picture)
            result = {k: result.get(k) for k in ("assignment", "score", "max_score", "error", "checks")}
        _results[resources["nbgrader"]["notebook"]] = result
        return nb, resources
    return type(judge_cls.__name__, (judge_cls,), {"preprocess": preprocess, "__module__": judge_cls.__module__})


def with_busy_timeout(db_url: str, seconds: float = SQLITE_BUSY_SECONDS) -> str:
    """The gradebook URL with SQLite's busy timeout, so parallel workers wait for the write lock."""
    if not db_url.startswith("sqlite:") or "timeout=" in db_url:
        return db_url
    return db_url + ("&" if "?" in db_url else "?") + f"timeout={seconds}"


def start(ctx):
    """In a freshly forked worker: settle the inherited app for grading here; return the job per student."""
    os.chdir(ctx.root)
    app = ctx.app
    app.coursedir.db_url = with_busy_timeout(ctx.gradebook.url)
    for h in list(app.log.handlers):          # nbgrader's console log goes to each student's log file instead
        h.setLevel(logging.CRITICAL + 1)
    app.log.setLevel(logging.INFO)
    logging.captureWarnings(True)             # e.g. SQLAlchemy's warnings from nbgrader's gradebook: to the log file
    logging.getLogger("py.warnings").propagate = False
    return lambda student: grade_one(ctx, student)


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
        except Exception:  # noqa: BLE001 - a log line must never fail a grading
            pass

    def close(self):
        try:
            self.stream.close()
        finally:
            super().close()


def grade_one(ctx, student: str) -> dict:
    """Grade ``student`` (nbgrader's --force semantics) and write their marker; the outcome the run records."""
    from nbgrader.converters import Autograde, NbGraderException

    from attnkit.isolation import sandbox
    t0 = time.monotonic()
    app = ctx.app
    ctx.state.mkdir(parents=True, exist_ok=True)
    markers.remove(ctx.marker(student))
    fingerprint = markers.fingerprint(ctx.submitted(student))
    notebooks = sorted(Path(p).stem for p in glob.glob(str(ctx.submitted(student) / (app.coursedir.notebook_id + ".ipynb"))))
    collect = _Collect(ctx.log_path(student))
    app.log.addHandler(collect)
    logging.getLogger("py.warnings").addHandler(collect)
    error = None
    attempts = 0
    try:
        for attempts in range(1, LOCK_RETRIES + 1):
            _results.clear()
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
    results = {k: v for k, v in _results.items() if v is not None}
    score = sum(r["score"] for r in results.values()) if results else None
    max_score = sum(r["max_score"] for r in results.values()) if results else None
    markers.write(ctx.marker(student), {
        "student": student, "assignment": ctx.assignment, "fingerprint": fingerprint,
        "notebooks": notebooks, "score": score, "max_score": max_score, "execute": ctx.execute,
        "graded_at": time.time(), "seconds": out["seconds"], "worker_pid": os.getpid(), "results": results})
    out.update(score=score, max_score=max_score)
    return out
