"""Notebooks the judge cannot grade say so in one sentence (issue 13, item 5), and a notebook that does not load
names the student's own error once, not the grading environment's (issue 12).

On the fixture course's example, and on every assignment of the demonstration course where its released helpers
(corpus.py, wordlm.py) could be blamed for the student's error: the kit must not, whichever assignment it is."""
import json

import pytest

from attnkit.mutants import module as corpus
from attnkit.engine import registry
from attnkit.engine.judge import grade
from tests.fixture_course import NAME
from tests.notebooks import solution_source, submission, write

V4 = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}}
V3_CELL = {"cell_type": "code", "input": "class Head: pass", "language": "python", "outputs": [], "metadata": {}}
UNREADABLE = {
    "nbformat 3": json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [V3_CELL]}]}),
    "nbformat 3 without worksheets": json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": []}),
    "no cells": json.dumps(dict(V4, cells=[])),
    "only markdown": json.dumps(dict(V4, cells=[{"cell_type": "markdown", "metadata": {}, "source": "# hi"}])),
    "no cells key": json.dumps(V4),
    "empty file": "",
    "not a dict": "[1, 2]",
    "a string": '"notebook"',
    "cells not a list": json.dumps(dict(V4, cells={"0": {}})),
    "nbformat 5": json.dumps({"nbformat": 5, "nbformat_minor": 0, "metadata": {}, "cells": []}),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_notebook_scores_zero_with_a_sentence(tmp_path, case, fixture_course):
    path = tmp_path / "submission.ipynb"
    path.write_text(UNREADABLE[case])
    r = grade(path, NAME)
    assert r["score"] == 0 and isinstance(r["error"], str) and len(r["error"]) > 20, r["error"]
    assert all(not c["passed"] and c["message"] == r["error"] for c in r["checks"])


def test_the_old_format_is_named(tmp_path, fixture_course):
    path = tmp_path / "submission.ipynb"
    path.write_text(UNREADABLE["nbformat 3"])
    assert "nbformat 3" in grade(path, NAME)["error"]


def _with_syntax_error(assignment):
    c = corpus(assignment)
    sol = solution_source(assignment, c.SOLUTION_CELL)
    broken = sol.replace("):", ")", 1)        # the first definition's line loses its colon
    assert broken != sol
    return submission(assignment, {c.SOLUTION_CELL: broken})


def _does_not_load(tmp_path, assignment):
    r = grade(write(_with_syntax_error(assignment), tmp_path / "nb.ipynb"), assignment)
    assert r["score"] == 0 and r["error"].startswith("your notebook could not be loaded: syntax error in cell ")
    assert r["error"].count("syntax error") == 1
    for c in r["checks"]:
        assert c["message"] == r["error"]
        assert "No module named" not in c["message"] and "is not defined" not in c["message"], c["message"]


def test_a_notebook_that_does_not_load_names_the_students_own_error_once(tmp_path, fixture_course):
    _does_not_load(tmp_path, NAME)


@pytest.mark.parametrize("assignment", registry.names())     # the demonstration course's, with released helpers
def test_the_released_helpers_are_not_blamed_for_a_notebook_that_does_not_load(tmp_path, assignment):
    _does_not_load(tmp_path, assignment)


def _renamed(assignment, tmp_path):
    """The contract's class or function renamed: graded, every check's message."""
    from attnkit.engine import config
    c, contract = corpus(assignment), config.load(assignment).contract
    word = "class" if contract.kind == "class" else "def"
    sol = solution_source(assignment, c.SOLUTION_CELL)
    renamed = sol.replace(f"{word} {contract.name}(", f"{word} My{contract.name}(", 1)
    assert renamed != sol
    r = grade(write(submission(assignment, {c.SOLUTION_CELL: renamed}), tmp_path / "nb.ipynb"), assignment)
    return {check["message"] for check in r["checks"]}, f"{contract.kind} `{contract.name}` not found in your notebook"


def test_a_missing_function_is_named(tmp_path, fixture_course):
    messages, expected = _renamed(NAME, tmp_path)
    assert messages == {expected}


@pytest.mark.parametrize("assignment", registry.names())     # the demonstration course's, with released helpers
def test_a_missing_class_is_not_blamed_on_the_release_helpers(tmp_path, assignment):
    """The class is missing (renamed): the feedback says so, without the imports of corpus.py or the constants
    the judge could not rebuild (they fail only in the grading child, the kit's business)."""
    messages, expected = _renamed(assignment, tmp_path)
    assert messages == {expected}
