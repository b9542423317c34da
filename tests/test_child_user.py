"""Without namespaces (e.g. a Gradescope container), a root grader runs submissions as another user.

ATTNKIT_CHILD_USER names the user; the child drops to it after importing torch and before any
submission code, so what root owns stays out of reach.
"""
import os
import stat

import pytest

from attnkit.isolation import sandbox
from attnkit.engine.judge import grade
from tests.fixture_course import MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import in_body, notebook, solution

LIMITS = sandbox.Limits(wall_seconds=40, cpu_seconds=40, memory_mb=6144, seconds_per_experiment=3)   # as test_hostile's

as_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"), reason="needs a root grader")


@pytest.fixture
def no_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "_namespaces_ok", False)
    monkeypatch.setenv("ATTNKIT_CHILD_USER", "nobody")


def _probe(target: str):
    """A correct answer that writes ``target`` and, if that worked, breaks itself."""
    return notebook(in_body(f"try:\n    open({target!r}, 'a').write('pwned')\n"
                            f"except OSError:\n    pass\nelse:\n    raise RuntimeError('wrote it')"))


@as_root
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_the_child_cannot_write_what_root_owns(fixture_course, no_namespaces, tmp_path, monkeypatch, zygote):
    monkeypatch.setenv("ATTNKIT_ZYGOTE", zygote)
    results = tmp_path / "results.json"
    results.write_text("{}")
    results.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    assert grade(notebook(solution()), A, LIMITS)["score"] == MAX_SCORE
    assert grade(_probe(str(results)), A, LIMITS)["score"] == MAX_SCORE
    assert results.read_text() == "{}"


@as_root
def test_without_the_user_the_same_probe_does_write(fixture_course, tmp_path, monkeypatch):
    """The probe above can tell: as root and without namespaces, the write succeeds and costs points."""
    monkeypatch.setattr(sandbox, "_namespaces_ok", False)
    monkeypatch.delenv("ATTNKIT_CHILD_USER", raising=False)
    target = tmp_path / "results.json"
    target.write_text("{}")
    assert grade(_probe(str(target)), A, LIMITS)["score"] < MAX_SCORE
    assert "pwned" in target.read_text()
