"""The fixture course's pytest fixtures (tests/fixture_course/__init__.py says what the course is).

``fixture_course_root``: the built course, read-only, shared by the run (under pytest-xdist, built by the first
worker that asks). ``fixture_course``: the same, made this process's course for one test. A process grades one
course at a time (its autograder/ is the package ``autograder``: attnkit/engine/registry.py), so for the test
the demonstration course's ``autograder`` modules are set aside, and put back after it, with the course.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnkit.engine import registry
from tests import KIT_ROOT
from tests.fixture_course import COURSE_ID, NAME

PACKAGE = registry.PACKAGE


def attnkit(*args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """``attnkit ARGS`` as an instructor types it in ``cwd``, with this venv's kit; a failure says its output."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "attnkit", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"attnkit {' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def build(root: Path) -> Path:
    """The fixture course at ``root``, made by the kit's commands (quickstart, new, release)."""
    attnkit("quickstart", COURSE_ID, "--course-dir", str(root), cwd=root.parent)
    attnkit("new", NAME, cwd=root)
    attnkit("release", NAME, cwd=root)
    return root


# A fixture course already built, for a run inside another (tests/test_kit_apart.py runs the kit's tests on a copy
# of the checkout: the course the kit made once is the same there, and its release costs a kernel run).
BUILT = "ATTNKIT_TESTS_FIXTURE_COURSE"


@pytest.fixture(scope="session")
def fixture_course_root(tmp_path_factory) -> Path:
    """Read-only: the fixture course, built once per run (copy it with tests.conftest.copy_course to change it)."""
    from tests.conftest import once_per_run
    if os.environ.get(BUILT):
        return Path(os.environ[BUILT])
    return once_per_run(tmp_path_factory, "fixture-course", lambda folder: build(folder / COURSE_ID)) / COURSE_ID


def _modules_of_the_course() -> dict:
    return {k: m for k, m in sys.modules.items() if k == PACKAGE or k.startswith(PACKAGE + ".")}


@contextlib.contextmanager
def as_course(root: Path):
    """``root`` as this process's course inside the block (its own ``autograder`` package in place of the one
    loaded); afterwards the demonstration course's modules come back as they were."""
    kept = _modules_of_the_course()
    for k in kept:
        del sys.modules[k]
    try:
        registry.use_course(root)
        yield root
    finally:
        for k in _modules_of_the_course():
            del sys.modules[k]
        sys.modules.update(kept)
        registry.use_course(KIT_ROOT)


@pytest.fixture
def fixture_course(fixture_course_root):
    """The fixture course as this process's course for the test (the registry, the judge, the corpus read it)."""
    with as_course(fixture_course_root) as root:
        yield root


# The example's sample class ([demo.students] of its manifest) graded by stock nbgrader: the solution, the
# unanswered release and a mistake (cy: the columns normalised).
NBGRADER_CLASS = ("ada", "ben", "cy")


@pytest.fixture(scope="session")
def fixture_nbgrader_class(tmp_path_factory, fixture_course_root) -> SimpleNamespace:
    """Read-only: ``.submitted``, the fixture course with NBGRADER_CLASS handed in (demo.sample_class), and
    ``.graded``, the same after `nbgrader autograde`, `nbgrader generate_feedback` and `nbgrader export`."""
    from attnkit.course import nbgrader
    from attnkit.demo import sample_class
    from tests.conftest import copy_course, once_per_run

    def build(base):
        course = copy_course(fixture_course_root, base / "graded")
        with as_course(course):
            sample_class(course, NAME)
        for folder in (course / "submitted").iterdir():
            if folder.name not in NBGRADER_CLASS:
                shutil.rmtree(folder)
        copy_course(course, base / "submitted")
        for step in (("autograde", NAME), ("generate_feedback", NAME), ("export",)):
            nbgrader(*step, cwd=course)
    base = once_per_run(tmp_path_factory, "fixture-nbgrader-class", build)
    return SimpleNamespace(submitted=base / "submitted", graded=base / "graded", students=list(NBGRADER_CLASS))


# ------------------------------------------------------------------- submissions to the fixture course's example
DEF_LINE = "def softmax_rows(scores):\n"       # the example's solution cell opens with it (scaffold's source)


def solution() -> str:
    """The example's solution cell (call inside a test that uses ``fixture_course``)."""
    from tests.notebooks import solution_source
    from tests.fixture_course import CONTRACT_CELL
    src = solution_source(NAME, CONTRACT_CELL)
    assert src.startswith(DEF_LINE), src[:200]
    return src


def in_body(code: str, src: str | None = None) -> str:
    """The solution with ``code`` run first in the function's body (before its docstring: then it is none)."""
    src = solution() if src is None else src
    return src.replace(DEF_LINE, DEF_LINE + "".join(f"    {line}\n" for line in code.splitlines()), 1)


def notebook(src: str):
    """The released notebook with ``src`` as its answer cell."""
    from tests.notebooks import submission
    from tests.fixture_course import CONTRACT_CELL
    return submission(NAME, {CONTRACT_CELL: src})
