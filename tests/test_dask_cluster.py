"""`attnkit autograde --scheduler`: the demo class judged on a real Dask cluster on this machine.

A real `dask scheduler` and two `dask worker` processes (one process, one thread each, each with its own
scratch directory: two machines as far as Dask can tell) on 127.0.0.1, on free ports of their own. The
grades must equal stock `nbgrader autograde`'s and the local path's; a worker SIGKILLed mid-class must
leave every student graded exactly once; the client must refuse a pickle; a plain tcp:// address off
this machine must be refused in one sentence.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from attnkit import autograde
from attnkit.autograde import cluster
from attnkit.course import BIN
from tests.conftest import copy_course
from tests.notebooks import cell, solution_source
from tests.test_autograde import A, _args, _class, _gradebook

STARTUP_SECONDS = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A scheduler and workers of this test's own; ``kill(i)`` SIGKILLs worker i; ``close()`` ends them all."""

    def __init__(self, folder: Path, workers: int = 2, worker_args: tuple = (), worker_env: dict | None = None,
                 **config):
        self.folder, self.procs, self.workers = folder, [], []
        port = _free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        # a dead worker's task is tried on 3 more before KilledWorker; a silent worker is dropped after 20 s
        self.env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                        DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="3",
                        DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL="20s")
        self.env.update({f"DASK_DISTRIBUTED__SCHEDULER__{k.upper()}": v for k, v in config.items()})
        # a worker does not hold the course's grading key: its own differs, and the tasks bring the plan seed
        self.env["ATTNKIT_GRADING_KEY"] = os.urandom(32).hex()
        self._start("scheduler", [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard", "--no-show"])
        for i in range(workers):
            scratch = folder / f"worker{i}"
            scratch.mkdir()
            self.workers.append(self._start(f"worker{i}", [
                str(BIN / "dask"), "worker", self.address, "--nworkers", "1", "--nthreads", "1", "--no-nanny",
                "--host", "127.0.0.1", "--no-dashboard", "--local-directory", str(scratch), "--name", f"w{i}",
                *worker_args], cwd=scratch, env=dict(self.env, **(worker_env or {}))))
        client = cluster.connect(self.address, timeout=STARTUP_SECONDS)
        try:
            client.wait_for_workers(workers, timeout=STARTUP_SECONDS)
        finally:
            client.close()

    def _start(self, name, cmd, cwd=None, env=None):
        p = subprocess.Popen(cmd, env=env or self.env, cwd=cwd or self.folder, stdout=subprocess.DEVNULL,
                             stderr=open(self.folder / f"{name}.log", "w"), start_new_session=True)
        self.procs.append(p)
        return p

    def kill(self, i: int) -> None:
        os.kill(self.workers[i].pid, signal.SIGKILL)

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


@pytest.fixture
def dask_cluster(tmp_path):
    folder = tmp_path / "dask"
    folder.mkdir()
    c = Cluster(folder)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(**config):
        folder = tmp_path / f"dask{len(made)}"
        folder.mkdir()
        made.append(Cluster(folder, **config))
        return made[-1]
    try:
        yield make
    finally:
        for c in made:
            c.close()


def _grade_cell_outputs(course, students) -> dict:
    """Each autograded notebook's grade cells: their outputs, as the feedback shows them."""
    out = {}
    for s in students:
        nb = nbformat.read(course / "autograded" / s / A / f"{A}.ipynb", as_version=4)
        out[s] = [(c.metadata["nbgrader"]["grade_id"], c.get("outputs")) for c in nb.cells
                  if c.metadata.get("nbgrader", {}).get("grade")] + [nb.metadata.get("attnkit")]   # the judge's whole result
    return out


def _csv(course) -> str:
    return (course / "autograded" / f"{A}-checks.csv").read_text()


def test_dask_path_records_what_nbgrader_and_the_local_path_record(nbgrader_class, dask_cluster, tmp_path, capsys):
    reference = nbgrader_class(A)
    students = sorted(reference.students)
    local = copy_course(reference.submitted, tmp_path / "local")
    remote = copy_course(reference.submitted, tmp_path / "remote")
    assert autograde.main(_args(local, "--jobs", "1", "--scheduler", "local")) == 0
    capsys.readouterr()
    assert autograde.main(_args(remote, "--scheduler", dask_cluster.address)) == 0
    err = capsys.readouterr().err
    assert f"Dask scheduler {dask_cluster.address}: 2 worker(s)" in err, err
    assert f"verdicts: {len(students)} notebook(s) judged on the cluster, 0 judged here" in err, err

    theirs = _gradebook(reference.graded)
    ours = _gradebook(remote)
    assert sorted(ours) == students
    assert ours == {s: theirs[s] for s in students}      # every grade cell, comment, total, as stock nbgrader's
    assert ours == _gradebook(local)
    assert _grade_cell_outputs(remote, students) == _grade_cell_outputs(local, students)
    assert _csv(remote) == _csv(local)
    run = json.loads((remote / autograde.STATE_DIR / A / "last_run.json").read_text())
    assert sorted(run["graded"]) == students and not run["failed"]
    judged_by = {w["pid"] for w in run["workers"]}          # Dask worker addresses: both took part or one did
    assert judged_by and all(str(a).startswith("tcp://127.0.0.1:") for a in judged_by)
    for s in students:                                   # the marker names the verdict's worker-free result
        marker = json.loads((remote / autograde.STATE_DIR / A / f"{s}.json").read_text())
        assert marker["score"] == ours[s]["score"]


def _slow_students(course, names) -> list[str]:
    """Correct submissions whose class body pauses 3 s each time the judge's child defines it (without burning a
    core), so a worker can be caught judging one with the class not yet done; names sort after the demo's. (With 1 s,
    on an idle machine, four of them on two workers were done before an interrupt sent 0.5 s into one landed: the
    run exited 0, the SIGINT arriving at its exit.)"""
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    forward = "    def forward(self, x):                                       # x: (B, T, d)\n"
    src = solution_source(A, "head")
    assert forward in src
    cell(nb, "head").source = src.replace(forward, "    _pause = __import__('time').sleep(3)\n\n" + forward)
    for name in names:
        (course / "submitted" / name / A).mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / name / A / f"{A}.ipynb")
    return names


def _while_judging(c: Cluster, i: int, action) -> threading.Event:
    """``action()`` once worker ``i`` is judging a slow submission (the scheduler says it is processing one);
    the event says it ran."""
    done = threading.Event()

    def watch():
        client = cluster.connect(c.address)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                info = client.scheduler_info(n_workers=-1)["workers"]
                address = next((a for a, w in info.items() if w.get("name") == f"w{i}"), None)
                if address and any("-slow" in k for k in client.processing([address]).get(address, ())):
                    time.sleep(0.5)                 # into the judge's child, not between steps
                    action()
                    done.set()
                    return
                time.sleep(0.05)
        finally:
            client.close()
    threading.Thread(target=watch, daemon=True).start()
    return done


def _finished(err: str) -> list[str]:
    """The students the run's progress lines say it recorded (graded or failed), once per line."""
    return [line.split("] ", 1)[1].split(":", 1)[0] for line in err.splitlines() if line.startswith("[") and "] " in line]


def test_a_worker_killed_mid_class_loses_no_student_and_grades_none_twice(released, dask_cluster, tmp_path, capsys):
    # 9: the demo's five (each outcome: solution, alternative, release, mistakes) and four slow ones, so that
    # worker 1 is caught judging one and others are left for after its death (more correct students add nothing)
    students = _class(released) + _slow_students(released, [f"x-slow{i}" for i in range(4)])
    local = copy_course(released, tmp_path / "local")
    assert autograde.main(_args(local, "--jobs", "1", "--scheduler", "local")) == 0
    state = released / autograde.STATE_DIR / A
    killed = _while_judging(dask_cluster, 1, lambda: dask_cluster.kill(1))
    capsys.readouterr()
    code = autograde.main(_args(released, "--scheduler", dask_cluster.address))
    err = capsys.readouterr().err
    assert killed.wait(5), "the worker was never killed: it judged no slow submission"
    assert dask_cluster.workers[1].poll() is not None
    assert code == 0, err
    assert f"verdicts: {len(students)} notebook(s) judged on the cluster, 0 judged here" in err, err
    finished = _finished(err)
    assert sorted(finished) == sorted(students), err          # each student recorded once: none lost, none twice
    ours = _gradebook(released)
    assert ours == _gradebook(local)
    assert _grade_cell_outputs(released, students) == _grade_cell_outputs(local, students)
    assert _csv(released) == _csv(local)
    run = json.loads((state / "last_run.json").read_text())
    assert sorted(run["graded"]) == sorted(students) and not run["failed"]


def test_with_no_failures_allowed_the_killed_workers_students_are_reported_and_a_rerun_grades_them(
        released, make_cluster, tmp_path, capsys):
    """allowed-failures 0: the task running on the killed worker ends in KilledWorker; its student is reported
    not graded (exit 1), no marker; a rerun grades exactly the students without one."""
    students = _class(released, keep=["ada", "cy"]) + _slow_students(released, [f"x-slow{i}" for i in range(3)])
    local = copy_course(released, tmp_path / "local")
    assert autograde.main(_args(local, "--jobs", "1", "--scheduler", "local")) == 0
    c = make_cluster(allowed_failures="0")
    killed = _while_judging(c, 1, lambda: c.kill(1))
    capsys.readouterr()
    assert autograde.main(_args(released, "--scheduler", c.address)) == 1
    err = capsys.readouterr().err
    assert killed.wait(5)
    assert sorted(_finished(err)) == sorted(students), err
    failed = sorted(line.split("] ", 1)[1].split(":", 1)[0] for line in err.splitlines() if ": FAILED (" in line)
    assert failed and all("KilledWorker" in line for line in err.splitlines() if ": FAILED (" in line), err
    state = released / autograde.STATE_DIR / A
    assert sorted(p.stem for p in state.glob("*.json") if p.name != "last_run.json") == sorted(set(students) - set(failed))
    assert autograde.main(_args(released, "--scheduler", c.address)) == 0
    err = capsys.readouterr().err
    assert f"{len(failed)} to grade" in err and f"{len(students) - len(failed)} already graded" in err, err
    assert sorted(_finished(err)) == failed
    assert _gradebook(released) == _gradebook(local)


def test_a_hung_worker_is_dropped_after_worker_ttl_and_its_students_graded_elsewhere(
        released, make_cluster, tmp_path, capsys):
    """SIGSTOP: the worker neither dies nor answers; the scheduler drops it after worker-ttl (10 s here) and
    its tasks run on the other worker."""
    students = _class(released, keep=["ada", "cy"]) + _slow_students(released, [f"x-slow{i}" for i in range(3)])
    c = make_cluster(worker_ttl="10s")
    stopped = _while_judging(c, 1, lambda: os.kill(c.workers[1].pid, signal.SIGSTOP))
    capsys.readouterr()
    assert autograde.main(_args(released, "--scheduler", c.address)) == 0
    err = capsys.readouterr().err
    assert stopped.wait(5)
    assert sorted(_finished(err)) == sorted(students), err
    assert f"verdicts: {len(students)} notebook(s) judged on the cluster, 0 judged here" in err, err
    assert "failed to heartbeat" in (c.folder / "scheduler.log").read_text()        # worker-ttl dropped it
    run = json.loads((released / autograde.STATE_DIR / A / "last_run.json").read_text())
    assert sorted(run["graded"]) == sorted(students) and not run["failed"]


def test_a_worker_slow_to_warm_up_keeps_its_heartbeat_and_is_not_dropped(released, make_cluster):
    """The judge's warm-up (the plugin's setup: the fork server's imports) takes longer than worker-ttl, as it may
    on a loaded machine: the worker must go on answering the scheduler meanwhile, so registering the plugin
    succeeds with every worker kept (a warm-up on the worker's event loop was dropped mid-registration, and the
    client's register_plugin failed with CommClosedError: the relay ended before the run started)."""
    c = make_cluster(workers=1, worker_ttl="5s",
                     worker_args=("--preload", str(Path(__file__).with_name("dask_slow_warmup.py"))))
    client = cluster.connect(c.address)
    try:
        client.register_plugin(cluster.Grading([A], str(released)), name=cluster.PLUGIN)
        assert [w.get("name") for w in client.scheduler_info(n_workers=-1)["workers"].values()] == ["w0"]
    finally:
        client.close()
    assert c.workers[0].poll() is None
    assert "failed to heartbeat" not in (c.folder / "scheduler.log").read_text()


def test_a_lost_scheduler_and_an_interrupted_client_leave_the_rest_to_a_rerun(released, make_cluster, capsys,
                                                                            monkeypatch):
    """The scheduler SIGKILLed mid-class: what arrived is recorded, the rest reported not graded (exit 1); then
    the client interrupted (SIGINT) mid-class on a new cluster: exit 130. A rerun grades exactly the students
    left, and nobody is graded twice (a recorded student's marker is never rewritten)."""
    students = _class(released, keep=["ada", "cy"]) + _slow_students(released, [f"x-slow{i}" for i in range(4)])
    state = released / autograde.STATE_DIR / A

    def markers():
        return {p.stem: p.stat().st_mtime_ns for p in state.glob("*.json") if p.name != "last_run.json"}
    c = make_cluster()
    lost = _while_judging(c, 1, lambda: os.kill(c.procs[0].pid, signal.SIGKILL))
    capsys.readouterr()
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 5)                   # the client gives up on it sooner
    assert autograde.main(_args(released, "--scheduler", c.address)) == 1
    err = capsys.readouterr().err
    assert lost.wait(5)
    assert sorted(_finished(err)) == sorted(students), err
    not_graded = sorted(set(students) - set(markers()))
    failed = [line for line in err.splitlines() if ": FAILED (" in line]
    assert not_graded and sorted(_finished("\n".join(failed))) == not_graded, err
    assert all("scheduler-connection-lost" in line or "Dask scheduler" in line for line in failed), err
    first = markers()

    c2 = make_cluster()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1")
    run = subprocess.Popen([sys.executable, "-m", "attnkit", "autograde", A, "--scheduler", c2.address, "--course-dir",
                            str(released)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        interrupted = _while_judging(c2, 1, lambda: run.send_signal(signal.SIGINT))
        _, err = run.communicate(timeout=300)
    finally:
        run.kill()
    assert interrupted.wait(5) and run.returncode == 130, err
    assert "run the same command again to grade the rest" in err
    second = markers()
    assert {s: second[s] for s in first} == first                     # recorded students untouched
    left = sorted(set(students) - set(second))
    assert autograde.main(_args(released, "--scheduler", c2.address)) == 0
    err = capsys.readouterr().err
    assert sorted(_finished(err)) == left, err
    assert sorted(markers()) == sorted(students)
    assert {s: markers()[s] for s in second} == second


def test_the_client_refuses_a_pickle_from_a_worker(dask_cluster, tmp_path):
    marker = tmp_path / "unpickled-by"

    class Payload:
        def __reduce__(self):          # run where it is unpickled: writes the unpickling process's pid
            return (os.system, (f"echo $PPID >> {marker}",))

    def hostile():
        return Payload()
    client = cluster.connect(dask_cluster.address)
    try:
        with pytest.raises(TypeError, match="only able to deserialize data with \\['msgpack'\\]"):
            client.submit(hostile, pure=False).result(timeout=120)
        assert client.submit(lambda: {"data": [1, 2.5, None, "x"]}, pure=False).result(timeout=120) == \
            {"data": [1, 2.5, None, "x"]}                       # plain data still comes back
    finally:
        client.close()
    unpicklers = marker.read_text().split() if marker.exists() else []
    assert str(os.getpid()) not in unpicklers


@pytest.mark.parametrize("address", ["tcp://192.0.2.7:8786", "192.0.2.7:8786", "tcp://grader.example.org:8786"])
def test_a_plain_tcp_scheduler_off_this_machine_is_refused(released, address, capsys):
    assert autograde.main(_args(released, "--scheduler", address)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plain tcp:// address off this machine" in err and "--insecure-scheduler" in err
    assert cluster.check_address(address, insecure=True).startswith("tcp://")       # said, then allowed
    for ok in ("tcp://127.0.0.1:8786", "localhost:8786", "tcp://[::1]:8786", "tls://grader.example.org:8786"):
        assert cluster.check_address(ok)
    with pytest.raises(cluster.SchedulerRefused, match="Dask's TLS settings are missing"):
        cluster.connect("tls://grader.example.org:8786")       # refused before any connection is tried
