"""The instructor's side of `attnkit autograde --scheduler`: submissions out to the cluster, records written here.

The same interface as pool.Pool (``run``, ``stop_all``, ``worker_outcomes``), so run.Run drives either.
Each student's notebooks go out as bytes in one Dask task (cluster.judge_submission); as results come
back, nbgrader's converter records each student here, in this process, through the same
worker.grade_one the local workers run, its judge step taking the cluster's verdict (cluster.view says
why that verdict is the judge's). At most ``window`` tasks are out at a time, so an interrupted run
leaves little queued on the cluster, and a student is recorded only when its result is here.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

from attnkit.autograde import cluster, cluster_reply
from attnkit.autograde.cluster_process import Relay, dask_config
from attnkit.engine import secret
from attnkit.isolation import files
from attnkit.nbgrader_ext.steps import JudgeGradeCells


class ClusterPool:
    def __init__(self, ctx, address: str, watchdog_seconds: float, worker_course: str):
        self.ctx, self.address, self.watchdog_seconds = ctx, address, watchdog_seconds
        self.worker_course = worker_course
        self.relay = None
        self.by_worker: dict[str, list] = {}
        self.judged_there = 0                       # notebooks recorded with the cluster's verdict
        self.judged_here = 0                        # notebooks whose verdict the cluster's could not stand for
        self.judge_seconds, self.record_seconds, self.recorded = 0.0, 0.0, 0     # for the closing line's means

    def started(self, workers: list[str]) -> str:
        return f"Dask scheduler {self.address}: {len(workers)} worker(s), {', '.join(workers)}"

    def worker_outcomes(self) -> list:
        return sorted(self.by_worker.items())

    def _payload(self, student: str) -> dict:
        folder = self.ctx.submitted(student)
        notebooks = {}
        for p in sorted(folder.glob(self.ctx.app.coursedir.notebook_id + ".ipynb")):
            try:
                data = files.read_in_folder(p)[0]
            except (OSError, files.Refused):      # judged here by nbgrader's own reading, same sentence
                data = b""
            notebooks[p.stem] = base64.b64encode(data).decode()
        # the student's plan seed (256 bits, as hex: msgpack carries integers of 64 bits at most), never the key
        seed = secret.seed_for(self.ctx.assignment, student).to_bytes(32, "little").hex()
        return {"notebooks": notebooks, "seed": seed}

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
        kit = cluster.kit_fingerprint(ctx.assignment)
        self.relay = Relay.start({
            "address": self.address, "timeout": cluster.CONNECT_SECONDS, "tls": cluster.tls_text(self.address),
            "dask_config": dask_config(), "assignment": ctx.assignment, "worker_course": self.worker_course,
            "kit": kit})
        scratch = tempfile.mkdtemp(prefix=f"attnkit-autograde-recorder{os.getpid()}-")
        previous_tempdir, tempfile.tempdir = tempfile.tempdir, scratch
        record = worker.start(ctx)                  # nbgrader's converter, here: the gradebook is this process's
        verdicts = _VerdictsForTheJudgeStep()
        pending, out = list(items), {}              # out: student -> (notebooks sent, sent at)
        relay = self.relay
        try:
            msg = relay.next(cluster.CONNECT_SECONDS + 60)
            if msg is None or "started" not in msg:
                raise cluster.SchedulerRefused((msg or {}).get("refused") or relay.why_silent())
            if on_start is not None:
                on_start(msg["started"])
            ended = False
            with verdicts:
                while pending or out:
                    msg = relay.next(1.0)
                    if msg is not None and "want" in msg:
                        for _ in range(min(msg["want"], len(pending))):
                            student = pending.pop(0)
                            payload = self._payload(student)
                            relay.send({"judge": student, "payload": payload})
                            out[student] = (set(payload["notebooks"]), time.monotonic())
                        if not pending and not ended:
                            relay.send({"end": True})
                            ended = True
                    elif msg is not None and "student" in msg and msg["student"] in out:
                        sent, t0 = out.pop(msg["student"])
                        report(msg["student"], self._record(msg["student"], msg, sent, t0, record, verdicts))
                    elif msg is not None and "lost" in msg or relay.gone():
                        why = "not graded: " + (msg or {}).get("lost", relay.why_silent())
                        for student, (_, t0) in list(out.items()) + [(s, (None, time.monotonic())) for s in pending]:
                            report(student, {"ok": False, "error": why, "seconds": time.monotonic() - t0})
                        pending, out = [], {}
                        break
                    for student, (_, t0) in list(out.items()):
                        if time.monotonic() - t0 > self.watchdog_seconds:
                            relay.send({"cancel": student})
                            out.pop(student)
                            report(student, {"ok": False, "seconds": time.monotonic() - t0,
                                             "error": f"not judged within {self.watchdog_seconds:.0f} s on the cluster"})
                    if on_wait is not None:
                        on_wait()
        finally:
            relay.finish()                          # it cancels what is still out: nothing of ours stays queued
            tempfile.tempdir = previous_tempdir
            shutil.rmtree(scratch, ignore_errors=True)

    def _record(self, student: str, msg: dict, sent: set, t0: float, record, verdicts) -> dict:
        """The student's outcome: recorded here (gradebook, autograded/, marker) from the cluster's verdict, or
        the reason the cluster gave none, or the reason its answer was refused (cluster_reply)."""
        if "error" in msg:
            return {"ok": False, "seconds": time.monotonic() - t0, "error": msg["error"]}
        try:
            reply = cluster_reply.reply(msg["reply"], self.ctx.assignment, sent)
        except cluster_reply.Refused as e:
            return {"ok": False, "seconds": time.monotonic() - t0, "error": f"not graded: {e}"}
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
        if self.relay is not None:
            print(f"verdicts: {self.judged_there} notebook(s) judged on the cluster, {self.judged_here} judged here "
                  f"(nbgrader's notebook differed from the one handed in, or the cluster could not read it)",
                  file=sys.stderr)
            if self.recorded:
                print(f"per student: {self.judge_seconds / self.recorded:.3f} s judging on a worker, "
                      f"{self.record_seconds / self.recorded:.3f} s recording here (nbgrader's pipeline, the gradebook)",
                      file=sys.stderr)
            self.relay = None


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
