import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attnkit import KIT_ROOT
from attnkit.course import write_course_config
from autograder.judge import grade
from tests.corpus import module as corpus, submissions as corpus_submissions  # noqa: F401 - used by tests


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
