"""The instructor's command line: help everywhere, one JSON object, honest exit codes.

On the fixture course (tests/fixture_course/): the commands are the kit's, the assignment any course's."""
import json
import os
import signal
import subprocess
import sys

import pytest

from attnkit import cli
from tests.fixture_course import CONTRACT_CELL as CELL, MAX_SCORE, NAME as A
from tests.notebooks import solution_source, submission, write

CMDS = ["grade", "release", "demo", "doctor", "selfcheck", "check", "autograde", "report", "export", "new", "quickstart"]


def attnkit(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "attnkit", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("cmd", [[]] + [[c] for c in CMDS])
def test_help(cmd):
    p = attnkit(*cmd, "--help")
    assert p.returncode == 0 and "usage: attnkit" in p.stdout


def test_grade_json_is_exactly_one_object_and_exit_zero_on_a_low_score(tmp_path, fixture_course):
    path = write(submission(A, {}), tmp_path / "s.ipynb")
    p = attnkit("grade", str(path), "--assignment", A, "--json", cwd=fixture_course)
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert {"assignment", "score", "max_score", "error", "checks"} <= set(result)
    assert result["score"] == 0 and result["max_score"] == MAX_SCORE
    for c in result["checks"]:
        assert {"id", "passed", "points", "max_points", "message", "diagnosis"} <= set(c)


def test_grade_table_for_a_human(tmp_path, fixture_course):
    path = write(submission(A, {CELL: solution_source(A, CELL)}), tmp_path / "s.ipynb")
    p = attnkit("grade", str(path), "--assignment", A, cwd=fixture_course)
    assert p.returncode == 0 and f"{A}: {MAX_SCORE} / {MAX_SCORE}" in p.stdout
    assert "PASS  reference_agreement" in p.stdout


@pytest.mark.parametrize("args", [["grade", "missing.ipynb", "--assignment", A],
                                  ["grade", "x.ipynb"], ["nonsense"]])
def test_bad_usage_exits_non_zero(args, fixture_course_root):
    assert attnkit(*args, cwd=fixture_course_root).returncode == 2


def test_unknown_assignment_is_bad_usage(tmp_path, fixture_course):
    path = write(submission(A, {}), tmp_path / "s.ipynb")
    p = attnkit("grade", str(path), "--assignment", "nope", cwd=fixture_course)
    assert p.returncode == 2 and "unknown assignment" in p.stderr


def test_doctor_reports_each_area(fixture_course_root):
    p = attnkit("doctor", cwd=fixture_course_root)
    for area in ("kit", "python", "packages", "alembic", "nbgrader", "gradebook", "data"):
        assert area in p.stdout
    assert p.returncode == (0 if "all good" in p.stdout else 1)


def test_selfcheck_reports_everything_caught_and_no_false_fail(fixture_course, monkeypatch, capsys):
    """`attnkit selfcheck` as the command line runs it, in the course (every assignment of it by default)."""
    monkeypatch.chdir(fixture_course)
    assert cli.main(["selfcheck"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith(A))
    assert "(100%)" in line and "false fails 0/" in line


def test_selfcheck_fails_when_a_check_goes_blind(fixture_course, monkeypatch):
    """Blind the agreement check: the mutant it alone catches must surface as uncaught."""
    from attnkit.engine import registry
    from attnkit.selfcheck import run_selfcheck
    plugin = registry.get(A).plugin()
    monkeypatch.setitem(plugin.checks, "reference_agreement", lambda results, plan: None)
    lines = []
    assert run_selfcheck([A], log=lines.append) == 1
    assert any("uncaught: mistake:no_max_subtracted" in l for l in lines), lines


def test_a_command_works_on_the_course_it_names_or_the_current_directory(tmp_path, monkeypatch, capsys,
                                                                         fixture_course):
    """The course is the current directory unless --course-dir names one (as nbgrader's CourseDirectory.root);
    a folder that is no course gets one sentence and exit 2, never the kit's own checkout by default."""
    path = write(submission(A, {CELL: solution_source(A, CELL)}), tmp_path / "s.ipynb")
    monkeypatch.chdir(tmp_path)                                   # not a course
    assert cli.main(["grade", str(path), "--assignment", A]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is not an attnkit course" in err and "--course-dir" in err and len(err.splitlines()) == 1
    assert cli.main(["grade", str(path), "--assignment", A, "--course-dir", str(fixture_course), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == MAX_SCORE
    monkeypatch.chdir(fixture_course)
    assert cli.main(["grade", str(path), "--assignment", A, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == MAX_SCORE


def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path, fixture_course):
    """`attnkit grade ... | head`: the reader closes the pipe before the table is written; no traceback."""
    path = write(submission(A, {CELL: solution_source(A, CELL)}), tmp_path / "s.ipynb")
    read, write_end = os.pipe()
    os.close(read)                                  # the reader is gone before anything is written
    p = subprocess.run([sys.executable, "-m", "attnkit", "grade", str(path), "--assignment", A],
                       stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300, cwd=fixture_course)
    os.close(write_end)
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
    assert p.stderr == "" and p.returncode == 128 + signal.SIGPIPE, (p.returncode, p.stderr)
