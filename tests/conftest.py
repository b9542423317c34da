import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attnkit import KIT_ROOT
from attnkit.course import write_course_config
from autograder.judge import grade
from tests.corpus import module as corpus, submissions as corpus_submissions  # noqa: F401 - used by tests

# The suite's own grading key, the same on every clone: the judge's inputs derive from it (autograder/secret.py),
# and which checks a few corpus mistakes lose beyond their own depends on those inputs (e.g. a head with biased
# projections leaves the convex hull for some inputs only). A course's key stays its own file, never this one.
os.environ.setdefault("ATTNKIT_GRADING_KEY", "08d591f82454cfcc72c19908fc7c731f7a6e82b109c3c420ded2d7e11beb72f5")


def _grade_all(assignment):
    subs = corpus_submissions(assignment)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:    # each grade is its own child process
        return dict(zip(subs, ex.map(lambda nb: grade(nb, assignment), subs.values())))


@pytest.fixture(scope="session")
def head_results():
    return _grade_all("causal_head")


@pytest.fixture(scope="session")
def lm_results():
    return _grade_all("attention_lm")


@pytest.fixture
def course(tmp_path) -> Path:
    """An empty scratch course using the kit's nbgrader settings, with every assignment's source."""
    root = tmp_path / "course"
    root.mkdir()
    write_course_config(root)
    for a in ("causal_head", "attention_lm"):
        shutil.copytree(KIT_ROOT / "source" / a, root / "source" / a, symlinks=False)
    return root
