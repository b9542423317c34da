"""One `attnkit autograde` run: who needs grading, the workers grading them, what is left behind, the exit status."""
from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import contextmanager

from attnkit.autograde import grades as gradebook_rows, markers, output, worker
from attnkit.autograde.lock import LOCK_PATIENCE, one_run_at_a_time
from attnkit.autograde.pool import Pool
from attnkit.autograde.prepare import Context
from attnkit.autograde.progress import Progress

WATCHDOG_GRACE = 300            # seconds beyond the judge's (and kernel's) own limits before a worker is ended


def watchdog_seconds(ctx: Context) -> float:
    """How long one student may take before the worker grading them is ended: the judge's own wall-clock
    limit (and the kernel's, when it runs), plus WATCHDOG_GRACE for nbgrader's own steps."""
    budget = ctx.judge_wall or 600.0
    if ctx.execute:
        from attnkit.nbgrader_ext.steps import SandboxedExecute
        try:
            budget += float(SandboxedExecute(parent=ctx.app).notebook_seconds)
        except Exception:  # noqa: BLE001 - the course's configuration of it is unreadable: the default
            budget += 600.0
    return budget + WATCHDOG_GRACE


@contextmanager
def _interrupts_end_the_loop():
    """SIGTERM raised as KeyboardInterrupt, like Ctrl-C, while the block runs (signals can be set only from
    the main thread: elsewhere, e.g. a caller's thread, the block runs with the caller's handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _term(signum, frame):
        raise KeyboardInterrupt
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _term), signal.SIGINT: signal.getsignal(signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _not_interruptible() -> None:
    """From here on the run only writes what it leaves behind: short, and must not be cut half-way."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Run:
    def __init__(self, ctx: Context, students: list[str], selection: list[str], jobs: int, force: bool):
        self.ctx, self.students, self.selection, self.jobs, self.force = ctx, students, selection, jobs, force
        self.outcomes: dict[str, dict] = {}
        self.skipped: list[str] = []
        self.interrupted = False
        self.pool = Pool(lambda: worker.start(ctx), jobs=jobs, watchdog_seconds=watchdog_seconds(ctx))

    def execute(self, lock_patience: float = LOCK_PATIENCE) -> int:
        """0: grading completed (whatever the scores); 1: some submissions could not be graded; 2: another
        run held the lock for ``lock_patience`` seconds; 130: interrupted."""
        lock_path = self.ctx.state / ".lock"
        with one_run_at_a_time(lock_path, lock_patience, waiting=lambda: print(
                "attnkit autograde: waiting for another run on this assignment to end", file=sys.stderr)) as held:
            if not held:
                print(f"attnkit autograde: another run is grading {self.ctx.assignment} in this course "
                      f"(lock {lock_path})", file=sys.stderr)
                return 2
            return self._execute()

    def _to_grade(self, grades: dict) -> tuple[list[str], dict[str, int]]:
        """The selected students to grade now, and how many for each reason."""
        ctx = self.ctx
        todo, reasons = [], {}
        for s in self.selection:
            why = "forced" if self.force else markers.why_regrade(
                markers.read(ctx.marker(s), s), ctx.submitted(s), ctx.autograded(s), grades.get(s), ctx.check_cells)
            if why is None:
                self.skipped.append(s)
            else:
                todo.append(s)
                reasons[why] = reasons.get(why, 0) + 1
        return todo, reasons

    def _execute(self) -> int:
        ctx = self.ctx
        t0 = time.monotonic()
        todo, reasons = self._to_grade(gradebook_rows.read_grades(ctx.gradebook, ctx.assignment))
        if ctx.create_students:
            gradebook_rows.enter_students(ctx.gradebook, todo)
        markers.sweep_temporary(ctx.state)
        progress = Progress(len(todo), sys.stderr)
        why = ", ".join(f"{n} {r}" for r, n in reasons.items() if r != "not graded yet")
        progress.say(f"attnkit autograde {ctx.assignment}: {len(todo)} to grade"
                     + (f" ({why})" if why else "")
                     + f", {len(self.skipped)} already graded"
                     + (" (skipped; --force to regrade)" if self.skipped else "")
                     + f"; {ctx.execute_note}")
        with _interrupts_end_the_loop():
            try:
                if todo:
                    self.pool.run(todo, lambda student, out: self._record(student, out, progress),
                                  on_start=lambda ids: progress.say(self.pool.started(ids)),
                                  on_wait=progress.refresh)
            except KeyboardInterrupt:
                self.interrupted = True
            _not_interruptible()
            self.pool.stop_all()
            progress.close()
            self._leave_behind(time.monotonic() - t0, todo)
        if self.interrupted:
            print(f"interrupted: {sum(1 for o in self.outcomes.values() if o['ok'])} graded in this run; "
                  f"run the same command again to grade the rest", file=sys.stderr)
            return 130
        return 1 if any(not o["ok"] for o in self.outcomes.values()) else 0

    def _record(self, student: str, out: dict, progress: Progress) -> None:
        out.setdefault("student", student)
        self.outcomes[student] = out
        if out["ok"]:
            score = "" if out.get("score") is None else f"{out['score']:g}/{out['max_score']:g} "
            progress.finished(f"{student}: {score}in {out['seconds']:.1f} s")
        else:
            log = self.ctx.log_path(student).relative_to(self.ctx.root)
            progress.finished(f"{student}: FAILED ({out['error'][:160]}; log: {log})")

    def _leave_behind(self, seconds: float, todo: list[str]) -> None:
        ctx = self.ctx
        grades = gradebook_rows.read_grades(ctx.gradebook, ctx.assignment)
        rows = output.write_checks_csv(ctx.csv_path, ctx.assignment, ctx.checks,
                                       {s: markers.read(ctx.marker(s), s) for s in self.students}, grades)
        output.write_run_json(ctx.state / "last_run.json", assignment=ctx.assignment, jobs=self.jobs,
                              execute=ctx.execute, todo=todo, outcomes=self.outcomes, skipped=self.skipped,
                              seconds=seconds, interrupted=self.interrupted,
                              workers=self.pool.worker_outcomes())
        print(output.summary(selection=self.selection, outcomes=self.outcomes, skipped=self.skipped, grades=grades,
                             checks=ctx.checks, jobs=self.jobs, todo=todo, interrupted=self.interrupted,
                             seconds=seconds, gradebook=str(ctx.gradebook), csv_path=ctx.csv_path, csv_rows=rows),
              flush=True)
