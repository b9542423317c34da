"""The Gradescope zip carries the grading key: it stays out of git, owner-only, and the doctor says when it is not.

Whoever has the key can compute the judge's inputs for a submission before it is graded (attnkit/engine/secret.py).
The journeys run in a copy of the fixture course kept in git (tests/fixture_course/: made by `attnkit quickstart`,
whose .gitignore it keeps), as an instructor types the commands.
"""
import os
import stat
import subprocess
import zipfile

import pytest

from attnkit.course import BIN
from tests import KIT_ROOT
from attnkit.gradescope_zip import build_zip
from tests.conftest import copy_course
from tests.fixture_course import NAME as A
KEY_ENTRY = ".attnkit/grading-key"                # where the zip holds the key (attnkit/gradescope.py reads it)


def _run(cmd, cwd, status: int | None = 0):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ATTNKIT_RUNS_CHECKOUT", "ATTNKIT_GRADING_KEY")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert status is None or p.returncode == status, f"{' '.join(map(str, cmd))}: {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def _git(clone, *args):
    return _run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], clone)


@pytest.fixture
def clone(tmp_path, fixture_course_root):
    """The fixture course as an instructor keeps it: a git repository of everything its .gitignore lets in."""
    course = copy_course(fixture_course_root, tmp_path / "course")
    _git(course, "init", "-q")
    _git(course, "add", ".")
    _git(course, "commit", "-q", "-m", "the course")
    return course


def _key_line(clone) -> str:
    out = _run([str(BIN / "attnkit"), "doctor"], clone, status=None)     # its exit: the other areas' too
    return next((line for line in out.splitlines() if line[5:].startswith("key ")), f"no key line in:\n{out}")


def test_the_zip_is_written_where_git_add_cannot_take_it(clone):
    printed = _run([str(BIN / "attnkit"), "export", A, "--format", "gradescope"], clone).strip()
    _git(clone, "add", ".")                                               # what an instructor does next
    staged = _git(clone, "diff", "--cached", "--name-only").split()
    assert not [n for n in staged if n.endswith(".zip") or "grading-key" in n], staged
    zip_path = clone / ".attnkit" / f"attnkit-{A}-gradescope.zip"        # beside the key, in the ignored folder
    assert printed == str(zip_path) and zipfile.is_zipfile(zip_path)
    assert stat.S_IMODE(zip_path.stat().st_mode) == 0o600                 # on disk too, as the key is


def test_the_key_unzips_readable_by_its_owner_alone(tmp_path, fixture_course):
    zip_path = build_zip(A, tmp_path / "gs.zip", fixture_course)
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.getinfo(KEY_ENTRY).external_attr >> 16 == stat.S_IFREG | 0o600
    # Info-ZIP's unzip, as Gradescope unpacks it, under the most common umask (which never adds bits)
    subprocess.run(["sh", "-c", f"umask 022 && unzip -q {zip_path} -d {tmp_path / 'source'}"], check=True)
    modes = {p.relative_to(tmp_path / "source").as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "source").rglob("*") if p.is_file()}
    assert modes[KEY_ENTRY] == 0o600
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755 and modes["pyproject.toml"] == 0o644


def test_the_doctor_names_a_tracked_key_or_zip_and_what_to_do(clone):
    _run([str(BIN / "attnkit"), "export", A, "--format", "gradescope", "--output", "for-upload.zip"], clone)
    assert _key_line(clone).startswith("ok   key ")
    _git(clone, "add", "for-upload.zip")                                 # a zip under any name: it holds the key
    _git(clone, "add", "-f", ".attnkit/grading-key")
    line = _key_line(clone)
    assert line.startswith("FIX  key ") and "git tracks .attnkit/grading-key, for-upload.zip," in line, line
    assert "`git rm --cached .attnkit/grading-key for-upload.zip`" in line and "rotate the key" in line, line
    _git(clone, "commit", "-q", "-m", "oops")
    os.remove(clone / "for-upload.zip")                                   # gone from the tree, still tracked
    assert "for-upload.zip" in _key_line(clone)
    _git(clone, "rm", "-q", "--cached", ".attnkit/grading-key", "for-upload.zip")   # what the doctor says to do
    assert _key_line(clone).startswith("ok   key ")


def test_the_guide_says_the_zip_holds_the_key():
    guide = (KIT_ROOT / "docs" / "gradescope.md").read_text()
    table = guide.split("| in the zip | why |", 1)[1].split("\n\n", 1)[0]
    assert f"`{KEY_ENTRY}`" in table and "password" in guide
