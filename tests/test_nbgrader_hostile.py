"""On the nbgrader path too: a hostile class is graded normally, and the course stays as it was."""
import copy
import hashlib
import secrets
import subprocess

import nbformat
import pytest
from nbgrader.api import Gradebook

from tests import KIT_ROOT
from attnkit.course import nbgrader
from attnkit.course import gradebook_scores
from autograder.causal_head import mutants
from tests.notebooks import cell, solution_source
from tests.test_hostile import confined, in_forward

SOL = solution_source("causal_head", "head")
SLEEPER = f"4343.{secrets.randbelow(10**6):06d}"    # this run's own orphan: another suite's is not ours
ATTACK = f"""import os, subprocess, torch
for target in ({str(KIT_ROOT)!r} + '/pwned.txt', '../../../pwned.txt', '../../../source/pwned.txt', '../pwned.txt'):
    try:
        open(target, 'w').write('x')
    except OSError as e:
        print('blocked', target, e)
subprocess.Popen(['sleep', '{SLEEPER}'], start_new_session=True)
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True"""


def _digest(*dirs):
    h = hashlib.sha256()
    for d in dirs:
        for p in sorted(d.rglob("*")):
            h.update(str(p.relative_to(d)).encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def _student(course, name, head_src, edit=None):
    nb = nbformat.read(course / "release" / "causal_head" / "causal_head.ipynb", as_version=4)
    cell(nb, "head").source = head_src
    if edit:
        edit(nb)
    dest = course / "submitted" / name / "causal_head"
    dest.mkdir(parents=True)
    nbformat.write(nb, dest / "causal_head.ipynb")


def _insert_after_head(code):
    def edit(nb):
        i = nb.cells.index(cell(nb, "head"))
        nb.cells.insert(i + 1, nbformat.v4.new_code_cell(code))
    return edit


def _delete_and_duplicate(nb):
    nb.cells.remove(cell(nb, "test_simplex_rows"))
    twin = copy.deepcopy(cell(nb, "hidden_scaling"))
    twin.id = "twin-of-hidden-scaling"
    nb.cells.append(twin)


@confined
def test_hostile_class_on_the_nbgrader_path(released):
    course = released                                    # causal_head generated (tests/conftest.py)
    _student(course, "alice", SOL)
    _student(course, "hang", SOL, _insert_after_head("while True:\n    pass"))
    _student(course, "attacker", mutants.mutate(SOL, "no_scale"), _insert_after_head(ATTACK))
    _student(course, "warner", "import warnings\n" + in_forward("warnings.warn('a library warning')"))
    _student(course, "deleter", SOL, _delete_and_duplicate)
    kit_before = _digest(KIT_ROOT / "source", KIT_ROOT / "release", KIT_ROOT / "autograder", KIT_ROOT / "grading_config", KIT_ROOT / "autograder")
    course_before = _digest(course / "source", course / "release", course / "submitted")

    nbgrader("autograde", "causal_head", "--SandboxedExecute.timeout=4", "--SandboxedExecute.notebook_seconds=30",
             cwd=course)

    scores = gradebook_scores(course, "causal_head")
    assert {s: v["auto"] for s, v in scores.items()} == {"alice": 20, "hang": 20, "attacker": 16, "warner": 20,
                                                          "deleter": 20}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook("causal_head", "causal_head", "deleter")
        assert not [g.name for g in nb.grades if g.cell_type == "code" and g.needs_manual_grade]
    assert _digest(KIT_ROOT / "source", KIT_ROOT / "release", KIT_ROOT / "autograder",
                   KIT_ROOT / "grading_config", KIT_ROOT / "autograder") == kit_before
    assert _digest(course / "source", course / "release", course / "submitted") == course_before
    assert not list(course.rglob("pwned.txt")) and not (KIT_ROOT / "pwned.txt").exists()
    assert subprocess.run(["pgrep", "-f", f"sleep {SLEEPER}"], capture_output=True).stdout == b""
    # the kernel really ran the notebook, in the sandbox: outputs are there
    executed = nbformat.read(course / "autograded" / "attacker" / "causal_head" / "causal_head.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "blocked" in text and "out torch.Size([4, 8, 16])" in text
