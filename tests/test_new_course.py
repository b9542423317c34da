"""A folder that is no course is told so, and nothing is written there; ``fresh_clone`` and ``digest``, the
helpers of the tests that walk a course of its own outside this checkout (tests/test_install_journey.py: the
installed kit, from quickstart to the exports; tests/test_new_assignment.py; tests/test_gradescope_key.py).
"""
import hashlib
import os
import shutil
import subprocess

from attnkit.course import BIN
from tests import KIT_ROOT

A = "week1"           # any assignment's name: the folder is no course
COURSE_FILES = ("autograder", "source", "release", "grading_config", "nbgrader_config.py", ".attnkit")


def fresh_clone(dest):
    """`git clone` of the kit, with the working tree's tracked and new files over it (uncommitted edits
    are what is under test; on a clean tree this changes nothing), and without its ignored course state."""
    subprocess.run(["git", "clone", "-q", str(KIT_ROOT), str(dest)], check=True)
    listed = subprocess.run(["git", "-C", str(KIT_ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = KIT_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
        elif (dest / rel).is_file():                           # deleted in the working tree
            (dest / rel).unlink()
    return dest


def digest(root) -> str:
    h = hashlib.sha256()
    for name in COURSE_FILES:
        for p in sorted((root / name).rglob("*")) if (root / name).is_dir() else [root / name]:
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def run(cmd, course, status=0, timeout=900):
    """A command as an instructor types it in the course: the venv on PATH, nothing of the checkout's on
    PYTHONPATH, the course's own grading key (the suite's fixed one is not given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_GRADING_KEY")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, cwd=course, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == status, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return p


def test_a_folder_that_is_no_course_is_told_so(tmp_path):
    p = run([str(BIN / "attnkit"), "release", A, "--no-solutions"], tmp_path, status=2)
    assert f"{tmp_path} is not an attnkit course" in p.stderr and "--course-dir" in p.stderr, p.stderr
    assert not any(tmp_path.iterdir()), "nothing is written in a folder that is no course"
