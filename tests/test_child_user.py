"""Without namespaces (e.g. a Gradescope container), a root grader runs submissions as another user.

ATTNKIT_CHILD_USER names the user; the child drops to it after importing torch and before any
submission code, so what root owns stays out of reach.
"""
import os
import stat

import pytest

from attnkit.isolation import sandbox
from attnkit.engine.judge import grade
from tests.test_hostile import LIMITS, SOL, head, in_init

A = "causal_head"
as_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"), reason="needs a root grader")


@pytest.fixture
def no_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "_namespaces_ok", False)
    monkeypatch.setenv("ATTNKIT_CHILD_USER", "nobody")


def _probe(target: str) -> str:
    """A correct head that writes ``target`` and, if that worked, breaks itself."""
    return head(in_init(f"try:\n    open({target!r}, 'a').write('pwned')\n"
                        f"except OSError:\n    pass\nelse:\n    raise RuntimeError('wrote it')", SOL))


@as_root
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_the_child_cannot_write_what_root_owns(no_namespaces, tmp_path, monkeypatch, zygote):
    monkeypatch.setenv("ATTNKIT_ZYGOTE", zygote)
    results = tmp_path / "results.json"
    results.write_text("{}")
    results.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    assert grade(head(SOL), A, LIMITS)["score"] == 20
    assert grade(_probe(str(results)), A, LIMITS)["score"] == 20
    assert results.read_text() == "{}"


@as_root
def test_without_the_user_the_same_probe_does_write(tmp_path, monkeypatch):
    """The probe above can tell: as root and without namespaces, the write succeeds and costs points."""
    monkeypatch.setattr(sandbox, "_namespaces_ok", False)
    monkeypatch.delenv("ATTNKIT_CHILD_USER", raising=False)
    target = tmp_path / "results.json"
    target.write_text("{}")
    assert grade(_probe(str(target)), A, LIMITS)["score"] < 20
    assert "pwned" in target.read_text()
