"""The instructor's command line: help everywhere, one JSON object, honest exit codes."""
import json
import os
import signal
import subprocess
import sys

import nbformat
import pytest

from attnkit import cli
from tests import KIT_ROOT
from tests.notebooks import solution_source, submission, write

CMDS = ["grade", "release", "demo", "doctor", "selfcheck", "check", "autograde", "report", "export", "new", "quickstart"]


def attnkit(*args):
    return subprocess.run([sys.executable, "-m", "attnkit", *args], capture_output=True, text=True)


@pytest.mark.parametrize("cmd", [[]] + [[c] for c in CMDS])
def test_help(cmd):
    p = attnkit(*cmd, "--help")
    assert p.returncode == 0 and "usage: attnkit" in p.stdout


def test_grade_json_is_exactly_one_object_and_exit_zero_on_a_low_score(tmp_path):
    path = write(submission("causal_head", {}), tmp_path / "s.ipynb")
    p = attnkit("grade", str(path), "--assignment", "causal_head", "--json")
    assert p.returncode == 0
    result = json.loads(p.stdout)
    assert {"assignment", "score", "max_score", "error", "checks"} <= set(result)
    assert result["score"] == 0 and result["max_score"] == 20
    for c in result["checks"]:
        assert {"id", "passed", "points", "max_points", "message", "diagnosis"} <= set(c)


def test_grade_table_for_a_human(tmp_path):
    path = write(submission("causal_head", {"head": solution_source("causal_head", "head")}), tmp_path / "s.ipynb")
    p = attnkit("grade", str(path), "--assignment", "causal_head")
    assert p.returncode == 0 and "causal_head: 20 / 20" in p.stdout and "PASS  scaling" in p.stdout


@pytest.mark.parametrize("args", [["grade", "missing.ipynb", "--assignment", "causal_head"],
                                  ["grade", "x.ipynb"], ["nonsense"]])
def test_bad_usage_exits_non_zero(args, tmp_path):
    assert attnkit(*args).returncode == 2


def test_unknown_assignment_is_bad_usage(tmp_path):
    path = write(submission("causal_head", {}), tmp_path / "s.ipynb")
    p = attnkit("grade", str(path), "--assignment", "nope")
    assert p.returncode == 2 and "unknown assignment" in p.stderr


def test_doctor_reports_each_area():
    p = attnkit("doctor")
    for area in ("kit", "python", "packages", "alembic", "nbgrader", "gradebook", "data"):
        assert area in p.stdout
    assert p.returncode == (0 if "all good" in p.stdout else 1)


def test_selfcheck_reports_everything_caught_and_no_false_fail(head_results, lm_results, monkeypatch, capsys):
    """`attnkit selfcheck` as the command line runs it (every assignment by default), on the judge's own verdicts
    for the corpus: the session graded exactly these notebooks under the same key (tests/conftest.py), so each is
    looked up by its content rather than graded a second time (the corpus costs a minute of CPU)."""
    from attnkit import cli
    from attnkit.engine import judge
    from attnkit.mutants import submissions
    graded = {"causal_head": head_results, "attention_lm": lm_results}
    verdicts = {(a, nbformat.writes(nb)): graded[a][name] for a in graded for name, nb in submissions(a).items()}
    served = []

    def judged(nb, assignment, limits=None):
        served.append(assignment)
        return verdicts[(assignment, nbformat.writes(nb))]          # a notebook the session did not grade: KeyError
    monkeypatch.setattr(judge, "grade", judged)
    assert cli.main(["selfcheck"]) == 0
    out = capsys.readouterr().out
    assert sorted(served) == sorted(a for a, _ in verdicts)          # the whole corpus of both, each once
    for a in ("causal_head", "attention_lm"):
        line = next(l for l in out.splitlines() if l.startswith(a))
        assert "(100%)" in line and "false fails 0/" in line


def test_selfcheck_fails_when_a_check_goes_blind(tmp_path, monkeypatch):
    """Blind the scaling check: the mutants it alone catches must surface as uncaught."""
    from attnkit.selfcheck import run_selfcheck
    from autograder.causal_head import ASSIGNMENT
    monkeypatch.setitem(ASSIGNMENT.checks, "scaling", lambda results, plan: None)
    monkeypatch.setitem(ASSIGNMENT.checks, "reference_agreement", lambda results, plan: None)
    lines = []
    assert run_selfcheck(["causal_head"], log=lines.append) == 1
    assert any("uncaught: mistake:no_scale" in l for l in lines)


def test_a_command_works_on_the_course_it_names_or_the_current_directory(tmp_path, monkeypatch, capsys):
    """The course is the current directory unless --course-dir names one (as nbgrader's CourseDirectory.root);
    a folder that is no course gets one sentence and exit 2, never the kit's own checkout by default."""
    path = write(submission("causal_head", {"head": solution_source("causal_head", "head")}), tmp_path / "s.ipynb")
    monkeypatch.chdir(tmp_path)                                   # not a course
    assert cli.main(["grade", str(path), "--assignment", "causal_head"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is not an attnkit course" in err and "--course-dir" in err and len(err.splitlines()) == 1
    assert cli.main(["grade", str(path), "--assignment", "causal_head", "--course-dir", str(KIT_ROOT), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == 20.0
    monkeypatch.chdir(KIT_ROOT)
    assert cli.main(["grade", str(path), "--assignment", "causal_head", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == 20.0


def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path):
    """`attnkit grade ... | head`: the reader closes the pipe before the table is written; no traceback."""
    path = write(submission("causal_head", {"head": solution_source("causal_head", "head")}), tmp_path / "s.ipynb")
    read, write_end = os.pipe()
    os.close(read)                                  # the reader is gone before anything is written
    p = subprocess.run([sys.executable, "-m", "attnkit", "grade", str(path), "--assignment", "causal_head"],
                       stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    os.close(write_end)
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
    assert p.stderr == "" and p.returncode == 128 + signal.SIGPIPE, (p.returncode, p.stderr)
