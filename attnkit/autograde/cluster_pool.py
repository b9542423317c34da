"""The instructor's side of `attnkit autograde --scheduler`: submissions out to the cluster, records written here.

The same interface as pool.Pool (``run``, ``stop_all``, ``worker_outcomes``), so run.Run drives either.
Each student's notebooks go out as bytes in one Dask task (cluster.judge_submission); as results come
back, nbgrader's converter records each student here, in this process, through the same
worker.grade_one the local workers run, its judge step taking the cluster's verdict (cluster.view says
why that verdict is the judge's). At most ``window`` tasks are out at a time, so an interrupted run
leaves little queued on the cluster, and a student is recorded only when its result is here.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

from attnkit.autograde import cluster
from attnkit.isolation import files
from attnkit.nbgrader_ext.steps import JudgeGradeCells

WINDOW_PER_THREAD = 2            # tasks kept out per worker thread: each busy, the next one already there


class ClusterPool:
    def __init__(self, ctx, address: str, watchdog_seconds: float, worker_course: str):
        self.ctx, self.address, self.watchdog_seconds = ctx, address, watchdog_seconds
        self.worker_course = worker_course
        self.client = None
        self.by_worker: dict[str, list] = {}
        self.judged_there = 0                       # notebooks recorded with the cluster's verdict
        self.judged_here = 0                        # notebooks whose verdict the cluster's could not stand for
        self.judge_seconds, self.record_seconds, self.recorded = 0.0, 0.0, 0     # for the closing line's means

    def started(self, workers: list[str]) -> str:
        return f"Dask scheduler {self.address}: {len(workers)} worker(s), {', '.join(workers)}"

    def worker_outcomes(self) -> list:
        return sorted(self.by_worker.items())

    def _payload(self, student: str, kit: str) -> dict:
        folder = self.ctx.submitted(student)
        notebooks = {}
        for p in sorted(folder.glob(self.ctx.app.coursedir.notebook_id + ".ipynb")):
            try:
                notebooks[p.stem] = files.read_in_folder(p)[0]
            except (OSError, files.Refused):      # judged here by nbgrader's own reading, same sentence
                notebooks[p.stem] = b""
        from attnkit.engine import secret
        # the student's plan seed (256 bits, as hex: msgpack carries integers of 64 bits at most), never the key
        seed = secret.seed_for(self.ctx.assignment, student).to_bytes(32, "little").hex()
        return {"assignment": self.ctx.assignment, "seed": seed, "kit": kit, "notebooks": notebooks}

    def run(self, items: list[str], on_result: Callable[[str, dict], None], on_start=None, on_wait=None) -> None:
        ctx = self.ctx

        def report(student: str, outcome: dict) -> None:
            if not outcome["ok"]:                   # the student's log says why, as a local worker's would
                try:
                    ctx.log_path(student).write_text(outcome["error"] + "\n")
                except OSError:
                    pass
            on_result(student, outcome)
        from attnkit.autograde import worker
        ctx.state.mkdir(parents=True, exist_ok=True)
        self.client = cluster.connect(self.address)
        self.client.register_plugin(cluster.Grading([ctx.assignment], self.worker_course), name=cluster.PLUGIN)
        workers = sorted(self.client.scheduler_info().get("workers", {}))
        if on_start is not None:
            on_start(workers)
        kit = cluster.kit_fingerprint(ctx.assignment)
        scratch = tempfile.mkdtemp(prefix=f"attnkit-autograde-recorder{os.getpid()}-")
        previous_tempdir, tempfile.tempdir = tempfile.tempdir, scratch
        record = worker.start(ctx)                  # nbgrader's converter, here: the gradebook is this process's
        verdicts = _VerdictsForTheJudgeStep()
        pending, out = list(items), {}              # out: future -> (student, submitted at)
        try:
            with verdicts:
                while pending or out:
                    try:
                        threads = sum(self.client.nthreads().values()) or 1
                        while pending and len(out) < WINDOW_PER_THREAD * threads:
                            student = pending[0]
                            f = self.client.submit(cluster.judge_submission, self._payload(student, kit),
                                                   key=f"attnkit-{ctx.assignment}-{student}-{os.urandom(6).hex()}",
                                                   pure=False, retries=0)
                            out[f] = (pending.pop(0), time.monotonic())
                    except OSError as e:            # the scheduler is gone (CommClosedError is an OSError)
                        why = f"not graded: the Dask scheduler {self.address} was lost ({str(e)[:120]})"
                        for f, (student, t0) in list(out.items()) + [(None, (s, time.monotonic())) for s in pending]:
                            report(student, {"ok": False, "error": why, "seconds": time.monotonic() - t0})
                        pending, out = [], {}
                        break
                    done = _first_done(list(out), seconds=1.0)
                    for f in done:
                        student, t0 = out.pop(f)
                        report(student, self._record(student, f, t0, record, verdicts))
                    for f, (student, t0) in list(out.items()):
                        if time.monotonic() - t0 > self.watchdog_seconds:
                            try:
                                f.cancel()
                            except Exception:  # noqa: BLE001 - reported not graded all the same
                                pass
                            out.pop(f)
                            report(student, {"ok": False, "seconds": time.monotonic() - t0,
                                                "error": f"not judged within {self.watchdog_seconds:.0f} s on the cluster"})
                    if on_wait is not None:
                        on_wait()
        finally:
            for f in out:                           # interrupted: nothing of ours stays queued on the cluster
                try:
                    f.cancel()
                except Exception:  # noqa: BLE001 - the scheduler is gone: nothing stays queued there either
                    pass
            tempfile.tempdir = previous_tempdir
            shutil.rmtree(scratch, ignore_errors=True)

    def _record(self, student: str, future, t0: float, record, verdicts) -> dict:
        """The student's outcome: recorded here (gradebook, autograded/, marker) from the cluster's verdict, or
        the reason the cluster gave none."""
        try:
            reply = json.loads(future.result())
        except Exception as e:  # noqa: BLE001 - KilledWorker, a lost or cancelled task, a refused pickle
            why = str(e) or type(e).__name__
            return {"ok": False, "seconds": time.monotonic() - t0, "error": f"the cluster did not judge it: "
                    f"{type(e).__name__}: {why[:300]}"}
        self.by_worker.setdefault(reply.get("worker") or "?", []).append(reply)
        if not reply.get("ok"):
            return {"ok": False, "seconds": time.monotonic() - t0, "error": reply.get("error") or "the worker failed"}
        verdicts.expect(reply["notebooks"])
        outcome = record(student)
        self.judged_here += verdicts.missed
        self.judged_there += verdicts.used
        outcome.update(worker=reply.get("worker"), judge_seconds=reply.get("seconds"))
        self.judge_seconds += reply.get("seconds") or 0.0
        self.record_seconds += outcome["seconds"]
        self.recorded += 1
        return outcome

    def stop_all(self) -> None:
        if self.client is not None:
            print(f"verdicts: {self.judged_there} notebook(s) judged on the cluster, {self.judged_here} judged here "
                  f"(nbgrader's notebook differed from the one handed in, or the cluster could not read it)",
                  file=sys.stderr)
            if self.recorded:
                print(f"per student: {self.judge_seconds / self.recorded:.3f} s judging on a worker, "
                      f"{self.record_seconds / self.recorded:.3f} s recording here (nbgrader's pipeline, the gradebook)",
                      file=sys.stderr)
            try:
                self.client.close(timeout=10)
            except Exception:  # noqa: BLE001 - the scheduler may already be gone; nothing is left to ask of it
                pass
            self.client = None


def _first_done(futures: list, seconds: float) -> list:
    """The futures done now, or within ``seconds`` (distributed.wait asks for the process's default client,
    which this run does not install)."""
    deadline = time.monotonic() + seconds
    while True:
        done = [f for f in futures if f.done()]
        if done or time.monotonic() >= deadline:
            return done
        time.sleep(0.02)


class _VerdictsForTheJudgeStep:
    """While active, nbgrader's JudgeGradeCells step takes the cluster's verdict for a notebook whose view (what
    the judge reads of it) is the one the worker judged (its declared seam, ``JudgeGradeCells.verdicts_from``);
    any other notebook is judged here. Only this process's grading is affected, for the duration of the run."""

    def __init__(self):
        self.results: dict[str, dict] = {}
        self.missed = self.used = 0

    def expect(self, notebooks: dict) -> None:
        self.results = {r["view"]: r["result"] for r in notebooks.values() if r}
        self.missed = self.used = 0

    def lookup(self, nb, assignment: str) -> dict | None:
        found = self.results.get(cluster.view_hash(cluster.view(nb))) if isinstance(nb, dict) else None
        if found is not None and found.get("assignment") == assignment:
            self.used += 1
            return json.loads(json.dumps(found))        # a copy: the step writes into it
        self.missed += 1
        return None

    def __enter__(self):
        JudgeGradeCells.verdicts_from = self.lookup
        return self

    def __exit__(self, *exc):
        JudgeGradeCells.verdicts_from = None
