"""`attnkit autograde` piece by piece, in seconds: markers, the atomic write, the run lock, the worker pool's
watchdog, the output writers and the progress display. No nbgrader run: tests/test_autograde.py grades
whole classes."""
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tests import KIT_ROOT
from attnkit.atomic import write_atomic
from attnkit.autograde import markers, output
from attnkit.autograde.lock import one_run_at_a_time
from attnkit.autograde.pool import Pool
from attnkit.autograde.progress import Progress

# ----------------------------------------------------------------------------------------- who handed in


def test_discover_finds_the_students_nbgraders_converter_would_grade(tmp_path):
    from nbgrader.coursedir import CourseDirectory

    from attnkit.autograde.prepare import discover
    handed_in = {"ada": ["hw1.ipynb"], "ben": ["notes.txt"], "cy": ["other.ipynb", "x.py"], "tee": ["hw1.ipynb"]}
    for student, files in handed_in.items():
        (tmp_path / "submitted" / student / "hw1").mkdir(parents=True)
        for f in files:
            (tmp_path / "submitted" / student / "hw1" / f).write_text("{}")
    (tmp_path / "submitted" / "dan").mkdir()                               # nothing for hw1
    (tmp_path / "submitted" / "eve" / "hw2").mkdir(parents=True)
    (tmp_path / "submitted" / "eve" / "hw2" / "hw2.ipynb").write_text("{}")
    app = SimpleNamespace(coursedir=CourseDirectory(root=str(tmp_path), student_id_exclude="tee"))
    assert discover(app, "hw1") == ["ada", "cy"]                          # ben: no notebook; tee: excluded
    app.coursedir.notebook_id = "hw1"
    assert discover(app, "hw1") == ["ada"]


def test_workers_gradebook_connections_wait_for_sqlites_write_lock():
    from attnkit.autograde.worker import with_busy_timeout
    assert with_busy_timeout("sqlite:////c/gradebook.db", 120) == "sqlite:////c/gradebook.db?timeout=120"
    assert with_busy_timeout("sqlite:////c/g.db?mode=rw", 5) == "sqlite:////c/g.db?mode=rw&timeout=5"
    assert with_busy_timeout("sqlite:////c/g.db?timeout=9", 5) == "sqlite:////c/g.db?timeout=9"   # the course's own
    assert with_busy_timeout("postgresql://h/db", 5) == "postgresql://h/db"


# ----------------------------------------------------------------------------------------- markers


def _submission(folder: Path, notebook: bytes = b'{"cells": []}') -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "nb.ipynb").write_bytes(notebook)
    (folder / "sub" / "data.txt").write_text("x")
    return folder


def test_fingerprint_changes_with_any_byte_or_name_and_only_then(tmp_path):
    a, b = _submission(tmp_path / "a"), _submission(tmp_path / "b")
    assert markers.fingerprint(a) == markers.fingerprint(b)          # what was handed in, not where it lies
    (b / "sub" / "data.txt").write_text("y")
    assert markers.fingerprint(a) != markers.fingerprint(b)
    (b / "sub" / "data.txt").write_text("x")
    assert markers.fingerprint(a) == markers.fingerprint(b)
    (b / "sub" / "data.txt").rename(b / "sub" / "data2.txt")
    assert markers.fingerprint(a) != markers.fingerprint(b)


def test_fingerprint_never_follows_links_nor_opens_fifos(tmp_path):
    folder = _submission(tmp_path / "a")
    before = markers.fingerprint(folder)
    os.symlink("/dev/zero", folder / "sub" / "endless")                # followed, this would read without end
    os.mkfifo(folder / "sub" / "pipe")                                 # opened, this would block
    started = time.monotonic()
    with_links = markers.fingerprint(folder)
    assert time.monotonic() - started < 5
    assert with_links != before
    (folder / "sub" / "endless").unlink()
    os.symlink("/dev/null", folder / "sub" / "endless")                # the link's target name counts
    assert markers.fingerprint(folder) != with_links


def _marked(tmp_path, points=1.0):
    """A graded student as the markers see them: (marker, submitted, autograded, grades, check cells)."""
    submitted = _submission(tmp_path / "submitted")
    autograded = tmp_path / "autograded"
    autograded.mkdir()
    (autograded / "nb.ipynb").write_text("{}")
    marker = {"student": "ada", "fingerprint": markers.fingerprint(submitted), "notebooks": ["nb"],
              "results": {"nb": {"checks": [{"id": "c1", "points": points}, {"id": "c2", "points": 0}]}}}
    grades = {("nb", "cell1"): {"auto_score": 1.0}, ("nb", "cell2"): {"auto_score": 0.0}}
    return marker, submitted, autograded, grades, {"c1": "cell1", "c2": "cell2"}


def test_a_marker_counts_only_while_submission_gradebook_and_autograded_agree(tmp_path):
    marker, submitted, autograded, grades, cells = _marked(tmp_path)
    assert markers.why_regrade(marker, submitted, autograded, grades, cells) is None
    assert markers.why_regrade(None, submitted, autograded, grades, cells) == "not graded yet"
    assert markers.why_regrade(marker, submitted, autograded, None, cells) == "missing from the gradebook"
    assert markers.why_regrade(marker, submitted, autograded, {**grades, ("nb", "cell1"): {"auto_score": 0.5}},
                               cells) == "gradebook disagrees with the marker"
    assert markers.why_regrade(marker, submitted, autograded, {("nb", "cell2"): {"auto_score": 0.0}},
                               cells) == "gradebook disagrees with the marker"      # a grade gone
    (autograded / "nb.ipynb").unlink()
    assert markers.why_regrade(marker, submitted, autograded, grades, cells) == "autograded notebook missing"
    (submitted / "sub" / "nb.ipynb").write_text('{"cells": [1]}')
    assert markers.why_regrade(marker, submitted, autograded, grades, cells) == "resubmitted since it was graded"


def test_markers_are_read_only_for_their_student_and_written_whole(tmp_path):
    path = tmp_path / "state" / "ada.json"
    assert markers.read(path, "ada") is None                            # none yet
    markers.write(path, {"student": "ada", "score": 3})
    assert markers.read(path, "ada") == {"student": "ada", "score": 3}
    assert markers.read(path, "ben") is None                            # someone else's (a renamed file)
    assert [p.name for p in path.parent.iterdir()] == ["ada.json"]     # no temporary file left
    path.write_text('{"student": "ada", "sco')                          # cut short (not by write_atomic)
    assert markers.read(path, "ada") is None
    markers.remove(path)
    markers.remove(path)                                                # already gone: fine
    assert not path.exists()


def test_sweep_removes_only_temporary_files_of_killed_writes(tmp_path):
    (tmp_path / ".ada.json.x1y2.tmp").write_text("half")
    (tmp_path / "ben.json").write_text("{}")
    (tmp_path / ".lock").write_text("")
    markers.sweep_temporary(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "ben.json"]
    markers.sweep_temporary(tmp_path / "absent")                       # no state yet: nothing to do


# ----------------------------------------------------------------------------------------- the atomic write


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "new" / "out.csv"
    write_atomic(path, "a,b\r\nc,d\r\n")
    assert path.read_bytes() == b"a,b\r\nc,d\r\n"                      # byte for byte: no newline translation
    assert path.stat().st_mode & 0o777 == 0o644
    write_atomic(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"

    def refuse(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "never")
    assert path.read_bytes() == b"\x00\xff"                             # the old file, whole
    assert [p.name for p in path.parent.iterdir()] == ["out.csv"]      # and no temporary file


def test_results_json_and_gradescope_zip_are_written_by_the_one_atomic_write(tmp_path, monkeypatch):
    from attnkit import gradescope, gradescope_zip
    written = []
    monkeypatch.setattr(gradescope, "write_atomic", lambda path, data, **kw: written.append((path, data)))
    monkeypatch.setattr(gradescope_zip, "write_atomic", lambda path, data, **kw: written.append((path, data)))
    monkeypatch.setattr(gradescope_zip, "kit_files", lambda assignment, root: {"a.txt": b"A"})
    gradescope.write_results(tmp_path / "results.json", {"score": 1})
    gradescope_zip.build_zip("any_assignment", tmp_path / "kit.zip")        # kit_files stands in for its files
    assert [p.name for p, _ in written] == ["results.json", "kit.zip"]
    assert json.loads(written[0][1]) == {"score": 1}
    assert written[1][1].startswith(b"PK")


# ----------------------------------------------------------------------------------------- the run lock

HOLDER = textwrap.dedent("""
    import os, sys, time
    from attnkit.autograde.lock import one_run_at_a_time
    with one_run_at_a_time(sys.argv[1]) as held:
        assert held
        worker = os.fork()
        if worker == 0:             # a worker, forked while the lock is held: it keeps the lock
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1)
            os.dup2(null, 2)
            time.sleep(60)
            os._exit(0)
        print(worker, flush=True)
        os._exit(0)                 # the parent vanishes (as under SIGKILL): no unlock, no cleanup
""")


def test_a_run_waits_then_gives_up_while_another_process_holds_the_lock(tmp_path):
    lock = tmp_path / "state" / ".lock"
    holder = subprocess.run([sys.executable, "-c", HOLDER, str(lock)], capture_output=True, text=True,
                            cwd=KIT_ROOT, env=dict(os.environ, PYTHONPATH=str(KIT_ROOT)), timeout=60)
    worker = psutil.Process(int(holder.stdout))
    try:
        # the holder is gone; the worker it forked still holds the lock, so a new run waits, then gives up
        waited = []
        started = time.monotonic()
        with one_run_at_a_time(lock, patience=1.0, waiting=lambda: waited.append(1)) as held:
            assert not held
        assert waited == [1] and time.monotonic() - started >= 1.0
        # once the worker is gone, the lock is free
        worker.kill()
        started = time.monotonic()
        with one_run_at_a_time(lock, patience=10.0, waiting=lambda: waited.append(2)) as held:
            assert held
        assert time.monotonic() - started < 5
    finally:
        if worker.is_running():
            worker.kill()


def test_autograde_says_plainly_that_another_run_holds_the_lock(tmp_path, capsys):
    from attnkit.autograde.prepare import Context
    from attnkit.autograde.run import Run
    ctx = Context(root=tmp_path, assignment="hw1", app=None, preprocessors=[], sanitize=[], execute=False,
                  execute_note="", judge_wall=10.0, checks=[], gradebook=None, create_students=False)
    with one_run_at_a_time(ctx.state / ".lock") as held:
        assert held
        assert Run(ctx, ["ada"], ["ada"], jobs=1, force=False).execute(lock_patience=0.5) == 2
    err = capsys.readouterr().err
    assert "waiting for another run on this assignment to end" in err
    assert f"another run is grading hw1 in this course (lock {ctx.state / '.lock'})" in err


# ----------------------------------------------------------------------------------------- the pool


def _stand_in_job(notes: Path):
    """A job in place of grading: 'stuck' hangs, 'die' ends its process, anything else returns at once.
    Each writes its worker's temporary directory to ``notes`` first."""
    def job(item):
        (notes / item).write_text(tempfile.gettempdir())
        if item == "stuck":
            time.sleep(3600)
        if item == "die":
            os._exit(7)
        return {"ok": True, "item": item, "pid": os.getpid()}
    return job


def test_the_watchdog_ends_a_stuck_worker_and_the_others_carry_on(tmp_path):
    pool = Pool(lambda: _stand_in_job(tmp_path), jobs=2, watchdog_seconds=2.0)
    results, pids = {}, []
    started = time.monotonic()
    pool.run(["stuck", "a", "b", "die", "c"], lambda item, out: results.setdefault(item, out),
             on_start=pids.extend)
    took = time.monotonic() - started
    assert len(pids) == 2
    assert results["stuck"]["ok"] is False and results["stuck"]["error"] == "grading took longer than 2 s"
    assert 2.0 <= results["stuck"]["seconds"] < 10
    assert results["die"] == {"ok": False, "error": "the worker process died (exit status 7)",
                              "seconds": results["die"]["seconds"]}
    assert all(results[i]["ok"] for i in "abc")                      # graded while the stuck one hung
    assert took < 15
    stuck_pid = next(w.proc.pid for w in pool.all_workers if any(o.get("error", "").startswith("grading took")
                                                                   for o in w.outcomes))
    assert not psutil.pid_exists(stuck_pid) or psutil.Process(stuck_pid).status() == psutil.STATUS_ZOMBIE
    # every worker's scratch directory is gone, the stuck one's (ended by SIGTERM) included
    scratch = {item: Path((tmp_path / item).read_text()) for item in ["stuck", "a", "b", "die", "c"]}
    assert all(d.name.startswith("attnkit-autograde-worker") for d in scratch.values())
    assert not [d for d in scratch.values() if d.exists()]
    assert not [w for w in pool.all_workers if w.proc.is_alive()]


def test_the_pool_reports_each_worker_and_what_it_returned(tmp_path):
    pool = Pool(lambda: _stand_in_job(tmp_path), jobs=2, watchdog_seconds=30.0)
    results = {}
    pool.run(["a", "b", "c", "d"], lambda item, out: results.setdefault(item, out))
    assert sorted(results) == ["a", "b", "c", "d"]
    by_worker = {w.proc.pid: [o["item"] for o in w.outcomes] for w in pool.all_workers}
    assert len(by_worker) == 2 and sorted(sum(by_worker.values(), [])) == ["a", "b", "c", "d"]
    assert all(results[i]["pid"] in by_worker and i in by_worker[results[i]["pid"]] for i in results)


# ----------------------------------------------------------------------------------------- output

CHECKS = [("c1", "cell1", "first", 1), ("c2", "cell2", "second", 2)]


def _result(passed1=True, passed2=False):
    return {"nb": {"checks": [
        {"id": "c1", "points": 1 if passed1 else 0, "max_points": 1, "passed": passed1, "message": "m1",
         "diagnosis": ""},
        {"id": "c2", "points": 2 if passed2 else 0, "max_points": 2, "passed": passed2, "message": "rows sum to 2",
         "diagnosis": "softmax over the wrong axis"}]}}


def _grades(c1, c2, written=False):
    g = {("nb", "cell1"): {"auto_score": c1, "max_score": 1, "cell_type": "code", "needs_manual_grade": False},
         ("nb", "cell2"): {"auto_score": c2, "max_score": 2, "cell_type": "code", "needs_manual_grade": False}}
    if written:
        g[("nb", "essay")] = {"auto_score": None, "manual_score": None, "max_score": 3, "cell_type": "markdown", "needs_manual_grade": True}
    return g


def test_the_per_check_csv_has_the_gradebooks_points_and_the_judges_words(tmp_path):
    import csv
    path = tmp_path / "autograded" / "hw1-checks.csv"
    grades = {"ada": _grades(1.0, 0.0), "cy": _grades(1.0, 1.5)}     # a TA gave cy 1.5 by hand: the gradebook wins
    rows = output.write_checks_csv(path, "hw1", CHECKS, {"ada": {"results": _result()}, "ben": None,
                                                         "cy": {"results": _result()}, "dan": {"results": _result()}},
                                   grades)
    table = list(csv.DictReader(open(path)))
    assert rows == len(table) == 4                                    # ben: no marker; dan: not in the gradebook
    assert list(table[0]) == output.CSV_HEADER
    assert [(r["student"], r["check"], r["grade_cell"], r["title"], r["points"], r["max_points"], r["passed"])
            for r in table] == [("ada", "c1", "cell1", "first", "1", "1", "yes"),
                                ("ada", "c2", "cell2", "second", "0", "2", "no"),
                                ("cy", "c1", "cell1", "first", "1", "1", "yes"),
                                ("cy", "c2", "cell2", "second", "1.5", "2", "no")]
    assert table[0]["message"] == "" and table[1]["message"] == "rows sum to 2"   # a passed check says nothing
    assert table[1]["diagnosis"] == "softmax over the wrong axis"
    assert not list(path.parent.glob(".*.tmp"))


def test_last_run_json_says_what_was_graded_failed_and_skipped(tmp_path):
    path = tmp_path / "last_run.json"
    outcomes = {"ada": {"ok": True, "error": None}, "ben": {"ok": False, "error": "the worker process died"}}
    workers = [(11, [{"ok": True, "rss_kib": 2048, "child_rss_kib": 4096}]), (12, [{"ok": False}])]
    output.write_run_json(path, assignment="hw1", jobs=2, execute=False, todo=["ada", "ben", "cy"],
                          outcomes=outcomes, skipped=["dan"], seconds=3.5, interrupted=True, workers=workers)
    info = json.loads(path.read_text())
    assert info == {"assignment": "hw1", "jobs": 2, "execute": False, "to_grade": 3, "graded": ["ada"],
                    "failed": {"ben": "the worker process died"}, "skipped": ["dan"], "seconds": 3.5,
                    "interrupted": True,
                    "workers": [{"pid": 11, "graded": 1, "peak_rss_mib": 2.0, "peak_judge_child_rss_mib": 4.0},
                                {"pid": 12, "graded": 1, "peak_rss_mib": 0.0, "peak_judge_child_rss_mib": 0.0}]}


def test_the_summary_names_each_students_score_status_and_lost_checks():
    text = output.summary(
        selection=["ada", "ben", "cy", "dan", "eve"],
        outcomes={"ada": {"ok": True}, "ben": {"ok": False, "error": "nbgrader failed: bad metadata"},
                  "eve": {"ok": True}},
        skipped=["cy"], grades={"ada": _grades(1.0, 0.0, written=True), "cy": _grades(0.0, 2.0),
                                "eve": _grades(0.0, 0.0)},
        checks=CHECKS[::-1], jobs=4, todo=["ada", "ben", "dan", "eve"], interrupted=True, seconds=30.0,
        gradebook="/course/gradebook.db", csv_path=Path("/course/autograded/hw1-checks.csv"), csv_rows=4)
    lines = text.splitlines()
    assert lines[0].split() == ["student", "score", "status", "failed", "checks"]
    assert lines[1].split() == ["ada", "1", "/", "3", "graded", "c2", "[written", "answer", "awaits", "a", "TA]"]
    assert lines[2].split()[:4] == ["ben", "-", "FAILED", "nbgrader"]
    assert lines[3].split() == ["cy", "2", "/", "3", "already", "graded", "c1"]
    assert lines[4].split() == ["dan", "-", "not", "graded"]
    assert lines[5].split() == ["eve", "0", "/", "3", "graded", "c2,", "c1"]      # in the checks' order
    assert lines[7] == ("2 graded, 1 already graded, 1 failed, 1 not reached (interrupted) in 30.0 s "
                        "with 4 worker(s), 4.0 submissions/min")
    assert lines[8:] == ["gradebook: /course/gradebook.db", "per-check CSV: /course/autograded/hw1-checks.csv (4 rows)"]


def test_the_demo_and_the_summary_print_one_class_table():
    """attnkit demo's table is the summary's without the status column: one renderer (attnkit/table.py)."""
    from attnkit.table import Row, class_table
    plain = class_table([Row("ada", 20, 20, ""), Row("benedict", 3.5, 20, "c1, c2")]).splitlines()
    assert plain[0].split() == ["student", "score", "failed", "checks"]
    assert plain[1].split() == ["ada", "20", "/", "20"] and plain[2].split() == ["benedict", "3.5", "/", "20", "c1,", "c2"]
    assert plain[1].index("20") == plain[2].index("3.5") + 1        # the scores line up under the header
    status = class_table([Row("ada", 20, 20, "", "graded"), Row("ben", None, None, "")]).splitlines()
    assert status[0].split()[:3] == ["student", "score", "status"] and status[2].split() == ["ben", "-"]


# ----------------------------------------------------------------------------------------- progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_off_a_terminal_is_one_plain_line_per_submission():
    log = io.StringIO()
    p = Progress(3, log)
    p.say("3 to grade")
    p.finished("ada: 20/20 in 1.0 s")
    p.refresh()
    p.finished("ben: FAILED (timeout; log: x.log)")
    p.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()       # no frames in a CI log
    assert len(lines) == 3 and lines[0] == "3 to grade"
    assert lines[1].startswith("[1/3] ada: 20/20 in 1.0 s  (") and "ETA" in lines[1]
    assert lines[2].startswith("[2/3] ben: FAILED (timeout; log: x.log)  (")


def test_progress_on_a_terminal_is_a_bar_with_count_rate_and_eta():
    tty = _Terminal()
    p = Progress(2, tty)
    p.say("2 to grade")
    p.finished("ada: 20/20 in 1.0 s")
    p.close()
    out = tty.getvalue()
    assert "\r" in out and "2 to grade\n" in out
    assert "1/2" in out and "ETA" in out and "last: ada: 20/20" in out
