"""Notebooks built to exhaust nbformat, refused from their bytes on every path that reads a submission.

Red team: 400,000 empty cells (within the 64 MB file cap) cost 377 s and 3.4 GiB of the grader before the
watchdog of `attnkit autograde` ended the worker, and stock `nbgrader autograde` has no watchdog. Here the
same, a cell's metadata nested 100,000 deep and a cell of 300,000 outputs go through `attnkit grade`'s reader
(attnkit.isolation.untrusted), `attnkit autograde` and stock `nbgrader autograde` (+ generate_feedback), each
in a class with an honest classmate. Asserted: the refusal of each costs under 500 MB of the grader's
memory (its seconds are printed, not bounded: a timed test fails under load), the student reads one sentence (feedback, log, the judge's result), every automatic
check scores 0, and the classmate keeps full marks. On a kit without the caps (attnkit.isolation.notebook_shape)
the run is cut off at RUN_SECONDS, or the sentence is missing: the tests fail.
"""
import copy
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from attnkit.course import BIN
from tests import KIT_ROOT
from tests.conftest import copy_course
from tests.fixture_course import CONTRACT_CELL, NAME as A
from tests.fixture_course.fixtures import as_course, solution
from tests.notebooks import cell

MIB = 500                         # what refusing one bomb may cost in memory (it takes ~50 MB, and ~1 s unloaded)
RUN_SECONDS = 420                 # a whole run; on a kit without the caps the first bomb alone takes longer
CELLS = 400_000


# On the fixture course (tests/fixture_course/): its released example is the notebook each bomb is built in.
@pytest.fixture(scope="module")
def release(fixture_course_root) -> nbformat.NotebookNode:
    return nbformat.read(str(fixture_course_root / "release" / A / f"{A}.ipynb"), as_version=4)


@pytest.fixture(scope="module")
def checks(fixture_course_root) -> list:
    """The example's checks (their grade cells and points)."""
    from attnkit.engine import config
    with as_course(fixture_course_root):
        return config.load(A).checks


def _honest(release, root) -> nbformat.NotebookNode:
    nb = copy.deepcopy(release)
    with as_course(root):
        cell(nb, CONTRACT_CELL).source = solution()
    return nb


def _with(release, placeholder_at, replacement: bytes) -> bytes:
    """The release as JSON text with one value replaced by ``replacement`` (built as text: fast, no tree)."""
    nb = json.loads(nbformat.writes(release))
    placeholder_at(nb, "@@BOMB@@")
    return json.dumps(nb).encode().replace(b'"@@BOMB@@"', replacement)


def cells_bomb(release) -> bytes:
    def put(nb, mark):
        nb["cells"].append(mark)
    one = b'{"cell_type": "markdown", "id": "b%d", "metadata": {}, "source": []}'
    return _with(release, put, b", ".join(one % i for i in range(CELLS)))


def nested_bomb(release) -> bytes:
    def put(nb, mark):
        nb["cells"][0]["metadata"]["deep"] = mark
    return _with(release, put, b'{"a": ' * 100_000 + b"1" + b"}" * 100_000)


def outputs_bomb(release) -> bytes:
    def put(nb, mark):
        code = next(c for c in nb["cells"] if c["cell_type"] == "code" and "nbgrader" not in c["metadata"])
        code["outputs"] = mark
    out = b'{"output_type": "stream", "name": "stdout", "text": "x\\n"}'
    return _with(release, put, b"[" + b", ".join([out] * 300_000) + b"]")


BOMBS = {"a_cells": cells_bomb, "a_nested": nested_bomb, "a_outputs": outputs_bomb}


@pytest.fixture(scope="module")
def sentences(release) -> dict:
    """Per bomb, the sentence that refuses it."""
    return {"a_cells": f"your notebook has {len(release.cells) + CELLS:,} cells; a notebook may have at most 5,000",
            "a_nested": "your notebook's JSON is nested more than 64 levels deep (in cell 1)",
            "a_outputs": "of your notebook has more than 2,000 outputs; a cell may have at most 2,000"}


@pytest.fixture(scope="module")
def bomb_files(tmp_path_factory, release) -> dict:
    folder = tmp_path_factory.mktemp("bombs")
    out = {}
    for name, make in BOMBS.items():
        out[name] = folder / f"{name}.ipynb"
        out[name].write_bytes(make(release))
        assert out[name].stat().st_size < 64 << 20          # under the file cap: only the shape can refuse it
    return out


# ============================================================================ the scan itself

HEAD = b'{"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": ['
CODE = b'{"cell_type": "code", "metadata": {}, "outputs": [], "source": '
SHAPES = {     # made when tested; 20-60 MB each, within the file cap: what each would cost nbformat, and the sentence that refuses it
    "escaped quotes": (lambda: HEAD + CODE + b'"' + b'\\"' * 30_000_000 + b'"}]}', "more than 200,000 values"),
    "numbers": (lambda: HEAD + b'{"cell_type": "code", "metadata": {"x": [' + b"1," * 30_000_000 + b'1]}, "outputs": [], '
                b'"source": ""}]}', "more than 200,000 values"),
    "lines of output": (lambda: HEAD + CODE + b'[], "outputs": [{"output_type": "stream", "name": "stdout", "text": ['
                        + b", ".join([b'"a\\n"'] * 3_000_000) + b"]}]}]}", "more than 200,000 values"),
    "keys": (lambda: b'{"metadata": {' + b", ".join(b'"k%d": 0' % i for i in range(2_000_000)) + b'}, "cells": []}',
             "an object in your notebook has more than 10,000 keys"),
    "source": (lambda: HEAD + CODE + b'"' + b"a" * 60_000_000 + b'"}]}', "cells hold more than 16 MB of source"),
    "output": (lambda: HEAD + CODE + b'[], "outputs": [{"output_type": "stream", "name": "stdout", "text": "'
               + b"a" * 40_000_000 + b'"}]}]}', "an output of cell 1 of your notebook is 38 MB"),
    # the second red team: the structure's keys spelt with JSON escapes, which json.loads reads as the same keys
    "escaped keys": (lambda: b'{"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "c\\u0065lls": ['
                     + b", ".join([b'{"cell_type": "markdown", "metadata": {}, "source": ""}'] * 80_000) + b"]}",
                     "your notebook has 80,000 cells"),
    "escaped output keys": (lambda: HEAD + b'{"cell_type": "code", "metadata": {}, "source": "", '
                            b'"\\u006futputs": [' + b", ".join([b'{"output_type": "stream", "name": "stdout", '
                            b'"text": "a"}'] * 3_000) + b"]}]}", "more than 2,000 outputs"),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_scan_refuses_every_shape_in_seconds(name):
    from attnkit.isolation import notebook_shape
    make, sentence = SHAPES[name]
    data = make()
    with pytest.raises(notebook_shape.Refused, match=re.escape(sentence)):     # the scan's own sentence: refused
        notebook_shape.check(data)                                              # before any parser builds it


@pytest.mark.parametrize("path", sorted(str(p.relative_to(KIT_ROOT)) for folder in ("release", "solutions", "source")
                                        for p in (KIT_ROOT / folder).glob("*/*.ipynb")))
def test_the_courses_own_notebooks_pass_the_scan(path):
    from attnkit.isolation import notebook_shape
    notebook_shape.check((KIT_ROOT / path).read_bytes())


# ============================================================================ the judge's reader (attnkit grade)

PROBE = textwrap.dedent("""
    import json, os, resource, sys, time
    from attnkit.engine.judge import grade
    def peak(who):
        return resource.getrusage(who).ru_maxrss / 1024
    before = peak(resource.RUSAGE_SELF)        # the judge's imports
    t = time.monotonic()
    result = grade(sys.argv[1], sys.argv[2])
    seconds = time.monotonic() - t
    from attnkit.isolation import untrusted
    for pid in list(untrusted._pending):      # the reader replied and is exiting: wait, so RUSAGE_CHILDREN counts it
        os.waitpid(pid, 0)
    # the judge's own growth, and the reader forked for the file: its whole peak (the judge's pages it touched too)
    grown = max(peak(resource.RUSAGE_SELF) - before, peak(resource.RUSAGE_CHILDREN))
    print(json.dumps({"result": result, "seconds": seconds, "mib": grown}))
""")


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_the_judges_reader_refuses_a_bomb_cheaply(bomb, bomb_files, sentences, fixture_course_root):
    p = subprocess.run([sys.executable, "-c", PROBE, str(bomb_files[bomb]), A], capture_output=True,
                       text=True, timeout=RUN_SECONDS, cwd=fixture_course_root, env=dict(os.environ, OMP_NUM_THREADS="1",
                                                                                PYTHONPATH=str(KIT_ROOT)))
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.splitlines()[-1])
    result = out["result"]
    assert result["score"] == 0 and sentences[bomb] in result["error"], result["error"]
    assert all(c["message"] == result["error"] and not c["passed"] for c in result["checks"])
    print(f"judge's reader, {bomb}: refused in {out['seconds']:.2f} s, {out['mib']:.0f} MiB")
    assert out["mib"] < MIB, out               # no bound on seconds: the sentence says the scan refused it


# ============================================================================ both nbgrader paths

PATHS = ["nbgrader autograde", "attnkit autograde"]


class TreeMemory(threading.Thread):
    """The summed resident memory of a process and its descendants, sampled every 20 ms with the wall clock."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root, self.samples, self.done = psutil.Process(pid), [], threading.Event()

    def run(self):
        while not self.done.is_set():
            total = 0
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.samples.append((time.time(), total))
            self.done.wait(0.02)

    def grown_mib(self, start: float, end: float) -> float:
        """How far above its level at ``start`` the tree went until ``end``."""
        before = [m for t, m in self.samples if t <= start][-1:] or [self.samples[0][1]]
        during = [m for t, m in self.samples if start <= t <= end] or before
        return (max(during) - before[0]) / (1 << 20)


def _run(cmd, cwd) -> tuple[list, TreeMemory]:
    """Run ``cmd``, sampling its memory; its stderr lines, each with the wall-clock time it arrived."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONPATH=str(KIT_ROOT))
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    memory = TreeMemory(proc.pid)
    memory.start()
    lines = []
    reader = threading.Thread(target=lambda: lines.extend((time.time(), line) for line in proc.stderr), daemon=True)
    reader.start()
    try:
        proc.wait(RUN_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{cmd[:3]} did not finish in {RUN_SECONDS} s (the bombs were not refused)")
    finally:
        memory.done.set()
        memory.join()
        reader.join()
    assert proc.returncode == 0, "".join(line for _, line in lines)[-3000:]
    return lines, memory


@pytest.fixture(scope="module", params=PATHS)
def graded(request, tmp_path_factory, fixture_course_root, release, bomb_files):
    """One class (three bombs, an honest classmate) graded by one path: per bomb, the seconds and MiB its refusal
    cost."""
    course = copy_course(fixture_course_root, tmp_path_factory.mktemp(request.param.replace(" ", "_")) / "course")
    for student, path in [*bomb_files.items(), ("zoe", None)]:
        folder = course / "submitted" / student / A
        folder.mkdir(parents=True)
        if path is None:
            nbformat.write(_honest(release, course), str(folder / f"{A}.ipynb"))
        else:
            (folder / f"{A}.ipynb").write_bytes(path.read_bytes())
    cost = {}
    if request.param == "nbgrader autograde":
        lines, memory = _run([str(BIN / "nbgrader"), "autograde", A], course)
        # a student's refusal: from nbgrader's first word about them to its first word about the next
        starts = [(t, s) for t, line in lines for s in [*BOMBS, "zoe"] if "Sanitizing" in line and f"/{s}/" in line]
        for (t, student), (t_next, _) in zip(starts, starts[1:]):
            if student in BOMBS:
                cost[student] = (t_next - t, memory.grown_mib(t, t_next))
        _run([str(BIN / "nbgrader"), "generate_feedback", A], course)
        log = "".join(line for _, line in lines)
        logs = {s: log for s in BOMBS}
    else:
        # one worker, students in order: each bomb's grading is a window of its own
        _, memory = _run([sys.executable, "-m", "attnkit", "autograde", A, "--jobs", "1", "--course-dir",
                          str(course)], KIT_ROOT)
        state = course / ".attnkit" / "autograde" / A
        for student in BOMBS:
            marker = json.loads((state / f"{student}.json").read_text())
            end = marker["graded_at"]
            cost[student] = (marker["seconds"], memory.grown_mib(end - marker["seconds"], end))
        logs = {s: (state / f"{s}.log").read_text() for s in BOMBS}
    return {"path": request.param, "course": course, "cost": cost, "logs": logs}


def _auto_scores(course: Path, student: str) -> dict:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(A, A, student)
        return {g.name: (g.auto_score, g.max_score) for g in nb.grades}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_a_bomb_is_refused_cheaply_with_one_sentence(graded, bomb, sentences, checks):
    seconds, mib = graded["cost"][bomb]
    print(f"{graded['path']}, {bomb}: refused in {seconds:.2f} s, the run's memory grew {mib:.0f} MiB")
    # no bound on the seconds (a timed test fails under load, and a bench measures speed): the scan's sentence
    # in the log is what shows the bomb never reached a parser, and the memory bound what it cost
    assert mib < MIB, (graded["path"], bomb, mib)
    assert sentences[bomb] in graded["logs"][bomb], graded["path"]
    autograded = nbformat.read(str(graded["course"] / "autograded" / bomb / A / f"{A}.ipynb"), as_version=4)
    assert sentences[bomb] in autograded.cells[0].source
    assert sentences[bomb] in autograded.metadata["attnkit"]["error"]
    scores = _auto_scores(graded["course"], bomb)
    assert all(scores[c.cell] == (0, c.points) for c in checks), (graded["path"], scores)
    if graded["path"] == "nbgrader autograde":
        feedback = (graded["course"] / "feedback" / bomb / A / f"{A}.html").read_text()
        assert sentences[bomb].replace("'", "&#39;") in feedback or sentences[bomb] in feedback


def test_the_honest_classmate_keeps_full_marks(graded, checks):
    scores = _auto_scores(graded["course"], "zoe")
    assert {c.cell: scores[c.cell] for c in checks} == {c.cell: (c.points, c.points) for c in checks}, \
        graded["path"]
