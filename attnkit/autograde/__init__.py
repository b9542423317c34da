"""`attnkit autograde ASSIGNMENT`: grade a whole class with nbgrader's own pipeline, in parallel, resumably.

Each submission goes through nbgrader's own `Autograde` converter, configured exactly as
`nbgrader autograde` configures it (the course root's nbgrader_config.py), so the gradebook,
`autograded/`, `nbgrader export`, formgrader and manual grading see what `nbgrader autograde`
would have recorded. What differs:

- **Start-up paid for once.** N worker processes are forked from a parent that has already
  imported nbgrader, torch and the kit; each grades one student at a time. The judge's fork
  server (attnkit/isolation/zygote.py) is started first, so its imports overlap the parent's, and is
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

Where each part lives: prepare (the app, the students, the pipeline), markers (what makes a rerun
skip a student), worker (one student through nbgrader's converter), pool (the forked workers and their
watchdog), lock (one run at a time), progress (tqdm), output (CSV, last_run.json, the summary), run
(one run, start to finish).

Exit status: 0 when grading completed (whatever the scores), 1 when some submission could not be
graded (nbgrader failed on it, or its worker died), 2 for bad usage, 130 when interrupted.
"""
from __future__ import annotations

import argparse
import sys

from attnkit.autograde.markers import STATE_DIR
from attnkit.autograde.prepare import UsageError, prepare

__all__ = ["STATE_DIR", "UsageError", "add_arguments", "main", "prepare"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("assignment", help="assignment id (a folder of autograder/)")
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
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="judge on this Dask cluster (tls://HOST:PORT, or tcp:// on this machine); the "
                             "gradebook is still written here. Default: the course's c.AttnkitCluster.scheduler, "
                             "else the local workers; 'local' for the local workers (docs/scaling.md)")
    parser.add_argument("--insecure-scheduler", action="store_true",
                        help="accept a plain tcp:// scheduler address off this machine (unencrypted, unauthenticated)")
    parser.add_argument("--course-dir", default=".", help="the nbgrader course root (default: current directory)")


def main(args) -> int:
    """Run `attnkit autograde`. 0: grading completed (whatever the scores); 1: some submissions could
    not be graded (nbgrader or the kit failed on them); 2: bad usage; 130: interrupted."""
    try:
        run = prepare(args)
    except UsageError as e:
        print(f"attnkit autograde: {e}", file=sys.stderr)
        return 2
    return run.execute()
