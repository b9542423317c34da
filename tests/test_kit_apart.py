"""The kit's tests stand apart from the demonstration course (issue 30, item 5): adding, renaming or removing one
of its assignments breaks no kit test.

The kit's tests are tests/*.py; they grade the fixture course (tests/fixture_course/). The demonstration course's
own tests are tests/course/. Proven on a copy of this checkout (its tracked and new files) from which a
demonstration assignment is removed: every kit test still collects, and the fixture course's tests pass there.
Cheap by design: one collection and a few fast tests, never the suite.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit.naming import naming
from tests import KIT_ROOT

DEMO = ("causal_head", "attention_lm")          # the demonstration course's assignments, as this checkout has them
COURSE_ROOMS = ("autograder", "source", "release", "solutions")
# Kit tests that still name a demonstration assignment, each to be moved onto the fixture course (the report of
# issue 30 lists why each is not yet). The list may only shrink: a new kit test grades the fixture course.
NOT_YET_APART = frozenset({
    "tests/conftest.py", "tests/hub.py", "tests/test_attack_nbgrader.py", "tests/test_attack_parsing.py",
    "tests/test_attack_sandbox.py", "tests/test_autograde.py", "tests/test_check_browser.py",
    "tests/test_check_browser_hub.py", "tests/test_check_save.py", "tests/test_class_report.py",
    "tests/test_covert_channel.py", "tests/test_data_fetch.py", "tests/test_data_mirror_hostile.py",
    "tests/test_feedback_browser.py", "tests/test_gradescope.py", "tests/test_gradescope_install.py",
    "tests/test_hostile.py", "tests/test_module_level.py", "tests/test_nbgrader_hostile.py",
    "tests/test_release_pipeline.py", "tests/test_serve_hub.py", "tests/test_terminal_inert.py",
    "tests/test_zygote.py",
})


def kit_test_files(root: Path) -> list[Path]:
    """The kit's test modules and helpers: tests/*.py, not the demonstration course's (tests/course/)."""
    return sorted(p for p in (root / "tests").glob("*.py") if p.name != "test_kit_apart.py")


def naming_demo(root: Path) -> set[str]:
    """The kit's test files that name a demonstration assignment (as a name or in a string, not in prose)."""
    return {f for f, _, _ in naming(DEMO, kit_test_files(root), root)}


def test_no_new_kit_test_names_a_demonstration_assignment():
    found = naming_demo(KIT_ROOT)
    assert found <= NOT_YET_APART, f"kit tests naming {DEMO} (grade the fixture course): {sorted(found - NOT_YET_APART)}"
    assert NOT_YET_APART <= found, f"apart now, take them off NOT_YET_APART: {sorted(NOT_YET_APART - found)}"


def test_the_guard_sees_a_kit_test_naming_one(tmp_path):
    (tmp_path / "tests" / "course").mkdir(parents=True)
    (tmp_path / "tests" / "test_x.py").write_text("A = 'attention_lm'\n# attention_lm in prose is no name\n")
    (tmp_path / "tests" / "test_y.py").write_text("from tests.fixture_course import NAME\n")
    (tmp_path / "tests" / "course" / "test_z.py").write_text("A = 'causal_head'\n")       # the course's own
    assert naming_demo(tmp_path) == {"tests/test_x.py"}


def checkout_without(dest: Path, assignment: str) -> Path:
    """A copy of this checkout's tracked and new files (not its ignored state: .venv, .attnkit, caches) with
    ``assignment`` removed from the demonstration course, as an instructor removes one."""
    listed = subprocess.run(["git", "-C", str(KIT_ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = KIT_ROOT / rel
        if src.is_symlink() or src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
    for room in COURSE_ROOMS:
        target = dest / room / assignment
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
    return dest


def pytest_in(root: Path, *args, env=None, timeout=900) -> subprocess.CompletedProcess:
    """pytest run in the copy, on the copy's kit and tests (the copy first on the path), one process."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, **(env or {})}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-o", "addopts=", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def without_lm(tmp_path_factory):
    return checkout_without(tmp_path_factory.mktemp("apart") / "kit", "attention_lm")


@pytest.fixture
def built_fixture_course(fixture_course_root, tmp_path) -> dict:
    """The environment that hands the copy's run this run's fixture course (a copy of it): the kit made it alike
    there, and building it again costs a kernel run (tests/fixture_course/fixtures.py)."""
    from tests.conftest import copy_course
    from tests.fixture_course.fixtures import BUILT
    return {BUILT: str(copy_course(fixture_course_root, tmp_path / "fixture"))}


def test_kit_tests_collect_without_a_demonstration_assignment(without_lm):
    assert not (without_lm / "autograder" / "attention_lm").exists() and (without_lm / "tests" / "course").is_dir()
    p = pytest_in(without_lm, "--collect-only", "tests", "--ignore=tests/course")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "error" not in p.stdout.splitlines()[-1], p.stdout[-2000:]


def test_the_collection_fails_when_a_kit_test_needs_the_removed_assignment(without_lm, tmp_path):
    """The collection above can fail: a kit test importing the removed assignment's plug-in is an error (collected
    alone, with the same conftest: the error is the file's, and the other files' collection is proven above)."""
    copy = shutil.copytree(without_lm, tmp_path / "kit", symlinks=True)
    (copy / "tests" / "test_needs_it.py").write_text("from autograder.attention_lm import ASSIGNMENT\n")
    p = pytest_in(copy, "--collect-only", "tests/test_needs_it.py")
    assert p.returncode != 0 and "test_needs_it.py" in p.stdout + p.stderr


def test_fixture_course_tests_pass_without_a_demonstration_assignment(without_lm, built_fixture_course):
    p = pytest_in(without_lm, "tests/test_cli.py", "-k", "grade_table or grade_json or selfcheck_reports",
                  env=built_fixture_course)
    assert p.returncode == 0 and re.search(r"^3 passed", p.stdout, re.M), p.stdout[-4000:] + p.stderr[-2000:]
