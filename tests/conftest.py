import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

# One OpenMP thread, as `make test` exports it, also for `pytest` run by hand: a worker that ran torch's parallel
# kernels and then forks (the autograde pool, in process) leaves its children waiting on the OpenMP pool's locks.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests import KIT_ROOT, slowest_first  # noqa: E402
from attnkit.course import nbgrader, write_course_config  # noqa: E402
from attnkit.demo import sample_class  # noqa: E402
from attnkit.engine import registry
from attnkit.engine.judge import grade
from attnkit.mutants import module as corpus, submissions as corpus_submissions  # noqa: F401 - used by tests

# The suite's own grading key, the same on every clone: the judge's inputs derive from it (attnkit/engine/secret.py).
# Every corpus entry loses exactly its listed checks under any key (bench/key_dependence.py measures it over 30
# random keys); a fixed one keeps each run's inputs, and so its figures, the same. A course's key stays its own.
os.environ.setdefault("ATTNKIT_GRADING_KEY", "08d591f82454cfcc72c19908fc7c731f7a6e82b109c3c420ded2d7e11beb72f5")

registry.use_course(KIT_ROOT)             # this checkout is the demonstration course the tests grade
# the kit's own tests grade the fixture course instead (tests/fixture_course/: its fixtures)
pytest_plugins = ("tests.fixture_course.fixtures",)
ASSIGNMENTS = tuple(registry.names())     # every assignment folder (attnkit/engine/registry.py)


@pytest.fixture(autouse=True)
def _the_demonstration_course():
    """Each test starts, and leaves, with this checkout as the process's course (a test may grade another)."""
    registry.use_course(KIT_ROOT)
    yield
    registry.use_course(KIT_ROOT)


@pytest.hookimpl(trylast=True)      # after -m and -k deselect: the shares are counted on what runs
def pytest_collection_modifyitems(config, items):
    """The slowest tests first, spread over the workers (tests/slowest_first.py): only the order changes."""
    slowest_first.reorder(config, items)


def pytest_configure(config):
    """Compile the kit's Python once, before any test (and, under pytest-xdist, in the controller before any
    worker starts): later imports then write no bytecode into the checkout, so a test that digests the kit's
    folders (nothing a submission did may change them) never sees another test's first import land there."""
    if not hasattr(config, "workerinput"):
        import compileall
        import re
        for room in ("attnkit", "autograder"):   # not what a student receives (source/, release/)
            compileall.compile_dir(KIT_ROOT / room, quiet=2, rx=re.compile(r"/source/"))


def _grade_all(assignment):
    """name -> its result, and name -> its operator watch's record of each experiment (the child's run the result
    was judged on: tests/course/test_attack_fused.py reads it, rather than run each submission a second time)."""
    from attnkit.engine import judge
    subs = corpus_submissions(assignment)
    ops, run = {}, judge.run_submission

    def recording(nb, *args, **kwargs):          # grade's own call, unchanged; the record is kept on the way out
        out = run(nb, *args, **kwargs)
        results, plan = out[0], out[1]
        ops[id(nb)] = {e["name"]: ((results.results.get(e["name"]) or [{}])[0] or {}).get("ops")
                       for e in plan["experiments"]}
        return out
    judge.run_submission = recording
    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:    # each grade is its own child process
            results = dict(zip(subs, ex.map(lambda nb: grade(nb, assignment), subs.values())))
    finally:
        judge.run_submission = run
    return results, {name: ops.get(id(nb)) for name, nb in subs.items()}


def once_per_run(tmp_path_factory, name: str, build) -> Path:
    """The folder ``build(folder)`` fills, built once per test run: under pytest-xdist the first worker to ask
    builds it while any other that asks waits, then every worker reads it (so a session fixture's work is not
    paid once per worker); alone, once per session. A build that failed part way is started again."""
    from filelock import FileLock
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"once-{name}"
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """assignment -> its corpus graded (name -> result), each assignment graded once per run, when asked."""
    return lambda assignment: _graded_corpus(tmp_path_factory, assignment)[0]


_GRADED: dict = {}


def _graded_corpus(tmp_path_factory, assignment: str) -> tuple[dict, dict]:
    """(name -> result, name -> experiment -> operator-watch record) of the corpus, graded once per run."""
    if assignment not in _GRADED:
        def build(f):
            results, ops = _grade_all(assignment)
            (f / "results.json").write_text(json.dumps(results))
            (f / "ops.json").write_text(json.dumps(ops))
        folder = once_per_run(tmp_path_factory, f"graded-{assignment}", build)
        _GRADED[assignment] = tuple(json.loads((folder / n).read_text()) for n in ("results.json", "ops.json"))
    return _GRADED[assignment]       # a result is JSON (grade --json)


@pytest.fixture(scope="session")
def graded_ops(tmp_path_factory):
    """assignment -> name -> experiment name -> what the child's operator watch recorded on the run ``graded`` judged."""
    return lambda assignment: _graded_corpus(tmp_path_factory, assignment)[1]


@pytest.fixture(scope="session")
def head_results(graded):
    return graded("causal_head")


@pytest.fixture(scope="session")
def lm_results(graded):
    return graded("attention_lm")


# ----------------------------------------------------------------------------------------- scratch courses
# Building a course costs nbgrader commands (seconds each); copying a built one costs milliseconds. So each kind
# is built once per session, read-only, and a test that changes its course works on its own copy (copy_course).

def scratch_course(root: Path, assignments=ASSIGNMENTS) -> Path:
    """An empty course at ``root`` using the kit's nbgrader settings, with the source of ``assignments``."""
    root.mkdir(parents=True)
    write_course_config(root)
    for a in assignments:
        shutil.copytree(KIT_ROOT / "source" / a, root / "source" / a, symlinks=False)
    return root


def copy_course(src: Path, dest: Path) -> Path:
    """A course of one's own, as ``src`` is (a course holds no absolute path but the kit's own config's)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


@pytest.fixture
def course(tmp_path) -> Path:
    """An empty scratch course using the kit's nbgrader settings, with every assignment's source."""
    return scratch_course(tmp_path / "course")


@pytest.fixture(scope="session")
def released_course(tmp_path_factory) -> Path:
    """Read-only (copy it to change it): `course` after `nbgrader generate_assignment causal_head` (its release/
    and a gradebook that knows it; attention_lm's source is there, not generated)."""
    def build(folder):
        nbgrader("generate_assignment", "causal_head", "--force", cwd=scratch_course(folder / "course"))
    return once_per_run(tmp_path_factory, "released", build) / "course"


@pytest.fixture
def released(tmp_path, released_course) -> Path:
    """A copy of ``released_course`` of this test's own."""
    return copy_course(released_course, tmp_path / "course")


# Per assignment: the demo's students graded by stock `nbgrader autograde` (the reference tests/test_autograde.py,
# tests/test_dask_cluster.py and tests/test_export.py compare attnkit's own paths with).
NBGRADER_CLASS = {"causal_head": ["ada", "ben", "cy", "dee"]}
STUDENT_HELPER = "raise SystemExit('student copy')\n"


@pytest.fixture(scope="session")
def nbgrader_class(tmp_path_factory, released_course):
    """``nbgrader_class(A)``, read-only, built on first use: ``.submitted``, a course with A generated and
    NBGRADER_CLASS[A] handed in (demo.sample_class; each also hands in a copy of the released helpers that
    would end the kernel run if it replaced them), and ``.graded``, the same course after `nbgrader autograde A`,
    `nbgrader generate_feedback A` and `nbgrader export` (grades.csv)."""
    def build(assignment, base):
        if assignment == "causal_head":
            course = copy_course(released_course, base / "graded")
        else:
            course = scratch_course(base / "graded")
            nbgrader("generate_assignment", assignment, "--force", cwd=course)
        sample_class(course, assignment)
        for folder in (course / "submitted").iterdir():
            if folder.name not in NBGRADER_CLASS[assignment]:
                shutil.rmtree(folder)
                continue
            for helper in (course / "source" / assignment).glob("*.py"):
                if not helper.name.endswith(".pct.py"):
                    (folder / assignment / helper.name).write_text(STUDENT_HELPER)
        copy_course(course, base / "submitted")
        nbgrader("autograde", assignment, cwd=course)
        nbgrader("generate_feedback", assignment, cwd=course)
        nbgrader("export", cwd=course)

    def get(assignment: str) -> SimpleNamespace:
        base = once_per_run(tmp_path_factory, f"nbgrader-{assignment}", lambda folder: build(assignment, folder))
        return SimpleNamespace(submitted=base / "submitted", graded=base / "graded", students=NBGRADER_CLASS[assignment])
    return get
