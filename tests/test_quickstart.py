"""`attnkit quickstart` and `attnkit new NAME --from SOURCE`: a course from nothing, and an assignment copied
into it with no link left pointing outside it. (The whole journey, installed: tests/test_install_journey.py.)"""
import os
import subprocess
from pathlib import Path

import pytest

from attnkit.course import BIN
from attnkit.engine import registry
from attnkit.quickstart import render
from tests import KIT_ROOT
from tests.conftest import copy_course
from tests.fixture_course import NAME as A


def attnkit(*args, cwd, status=0):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_GRADING_KEY")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"          # the venv activated
    p = subprocess.run([str(BIN / "attnkit"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == status, f"attnkit {' '.join(args)} ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p


def test_the_demonstration_course_is_what_quickstart_makes_for_its_id():
    """One template: the kit's grading settings a new course gets are this course's own, its id aside."""
    made = render("attnkit")
    assert made["grading_config/nbgrader_config.py"] == (KIT_ROOT / "grading_config" / "nbgrader_config.py").read_text()
    assert made["nbgrader_config.py"] == (KIT_ROOT / "nbgrader_config.py").read_text()
    assert 'c.CourseDirectory.course_id = "cs229"' in render("cs229")["grading_config/nbgrader_config.py"]


def test_quickstart_makes_a_course_folder_named_by_its_id_and_never_writes_over_one(tmp_path):
    attnkit("quickstart", "cs229", cwd=tmp_path)
    course = tmp_path / "cs229"
    assert (course / "autograder" / "__init__.py").is_file() and (course / "source").is_dir()
    assert (course / ".attnkit" / "grading-key").stat().st_mode & 0o077 == 0
    assert (course / ".attnkit" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert "gradebook.db" in (course / ".gitignore").read_text().splitlines()
    key = (course / ".attnkit" / "grading-key").read_bytes()

    again = attnkit("quickstart", "other", "--course-dir", str(course), cwd=tmp_path, status=2)
    assert "already holds a course" in again.stderr and again.stderr.count("\n") == 1, again.stderr
    assert (course / ".attnkit" / "grading-key").read_bytes() == key
    assert 'course_id = "cs229"' in (course / "grading_config" / "nbgrader_config.py").read_text()

    bad = attnkit("quickstart", "no/slash", cwd=tmp_path, status=2)
    assert "not a valid course id" in bad.stderr and not (tmp_path / "no").exists()

    doctor = attnkit("doctor", cwd=course).stdout
    assert "ok   gradebook no gradebook yet" in doctor, doctor


@pytest.fixture
def linked(fixture_course_root, tmp_path) -> Path:
    """The fixture course's example folder, as another course keeps it: a copy whose released helper is a link to a
    file of that course's own data/ (as this checkout links a corpus helper), so a copy made by `cp -r`
    leaves the link dangling."""
    other = copy_course(fixture_course_root, tmp_path / "other")
    (other / "data").mkdir(exist_ok=True)
    (other / "data" / "notes.py").write_text("HINT = 'subtract the row maximum'\n")
    (other / "autograder" / A / "source" / "notes.py").symlink_to(os.path.join("..", "..", "..", "data", "notes.py"))
    return other / "autograder" / A


def test_an_assignment_copied_from_another_course_keeps_no_link_outside_it(tmp_path, linked):
    attnkit("quickstart", "c2", "--course-dir", str(tmp_path / "c2"), cwd=tmp_path)
    course = tmp_path / "c2"
    wrong = attnkit("new", "week2", "--from", str(linked), cwd=course, status=2)
    assert f"attnkit new {A} --from {linked}" in wrong.stderr, wrong.stderr
    attnkit("new", A, "--from", str(linked), cwd=course)
    folder = course / "autograder" / A
    assert not [p for p in folder.rglob("*") if p.is_symlink()]
    assert (folder / "source" / "notes.py").read_bytes() == (linked / "source" / "notes.py").read_bytes()
    assert (course / "source" / A).resolve() == (folder / "source").resolve()
    doctor = attnkit("doctor", cwd=course, status=1).stdout         # no gradebook yet: the one problem
    assert "FIX  nbgrader" not in doctor and "Error" not in doctor, doctor


def test_a_link_left_dangling_by_cp_is_named_in_one_sentence(tmp_path, linked):
    attnkit("quickstart", "c3", "--course-dir", str(tmp_path / "c3"), cwd=tmp_path)
    course = tmp_path / "c3"
    subprocess.run(["cp", "-r", str(linked), str(course / "autograder")], check=True)
    (course / "source" / A).symlink_to(f"../autograder/{A}/source")
    p = attnkit("release", A, "--no-solutions", cwd=course, status=2)
    assert "notes.py -> ../../../data/notes.py" in p.stderr and "Traceback" not in p.stderr, p.stderr
    doctor = attnkit("doctor", cwd=course, status=1).stdout
    assert f"FIX  nbgrader  source/{A} has links that point nowhere" in doctor, doctor


def test_copied_from_the_demonstration_course_by_its_name(tmp_path):
    """In the kit's own checkout, `--from` takes a demonstration assignment's name; its corpus helper (a link there)
    is copied as a file."""
    attnkit("quickstart", "c4", "--course-dir", str(tmp_path / "c4"), cwd=tmp_path)
    course = tmp_path / "c4"
    name = registry.names()[0]
    attnkit("new", name, "--from", name, cwd=course)
    folder = course / "autograder" / name
    assert (folder / "manifest.toml").is_file() and not [p for p in folder.rglob("*") if p.is_symlink()]
