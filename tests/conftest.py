import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attnkit import KIT_ROOT
from attnkit.course import write_course_config
from autograder.judge import grade
from tests.corpus import causal_head as corpus
from tests.notebooks import solution_source, submission

PREAMBLE = "import torch, torch.nn as nn, torch.nn.functional as F\n"


def head_submissions() -> dict:
    """name -> notebook, for the solution, the unanswered release, every mistake and every alternative."""
    sol = solution_source("causal_head", "head")
    subs = {"solution": submission("causal_head", {"head": sol}), "release": submission("causal_head", {})}
    subs.update({f"mistake:{n}": submission("causal_head", {"head": corpus.mutate(sol, n)}) for n in corpus.MISTAKES})
    subs.update({f"alternative:{n}": submission("causal_head", {"head": PREAMBLE + src})
                 for n, src in corpus.ALTERNATIVES.items()})
    return subs


@pytest.fixture(scope="session")
def head_results():
    """Every corpus submission graded once (two at a time: each is its own child process)."""
    subs = head_submissions()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        return dict(zip(subs, ex.map(lambda nb: grade(nb, "causal_head"), subs.values())))


@pytest.fixture
def course(tmp_path) -> Path:
    """An empty scratch course using the kit's nbgrader settings, with the causal_head source."""
    root = tmp_path / "course"
    root.mkdir()
    write_course_config(root)
    shutil.copytree(KIT_ROOT / "source" / "causal_head", root / "source" / "causal_head", symlinks=False)
    return root
