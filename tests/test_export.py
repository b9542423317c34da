"""`attnkit export A --format csv`: per-check points from the gradebook, whichever command graded the class.

On the fixture course (tests/fixture_course/): its example's two checks and a written answer of one point."""
import csv
import io
import json
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from attnkit import cli
from attnkit.course import BIN, nbgrader
from attnkit.engine.judge import grade
from tests.conftest import copy_course
from tests.fixture_course import CHECKS, CONTRACT_CELL, MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course, solution
from tests.notebooks import cell, hand_in

WRITTEN = "written_why_max"      # the example's written answer ([manual]: 1 point)
MAX = f"{MAX_SCORE + 1:g}"      # what nbgrader's gradebook counts: the checks' points and the written answer's


def attnkit(*args, cwd):
    return subprocess.run([sys.executable, "-m", "attnkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _submit(course, student, answer):
    return hand_in(course, A, student, {CONTRACT_CELL: answer, WRITTEN: "The softmax is unchanged by a constant per "
                                        "row; exp then never overflows."})


def _export(course) -> tuple[list[str], dict[str, dict], str]:
    p = attnkit("export", A, "--format", "csv", cwd=course)
    assert p.returncode == 0, p.stderr[-3000:]
    reader = csv.DictReader(io.StringIO(p.stdout))
    return reader.fieldnames, {r["student_id"]: r for r in reader}, p.stderr


def _gradebook_totals(course) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(A)}


@pytest.fixture(scope="module")
def ada_and_cy(tmp_path_factory, fixture_course_root):
    """Read-only (each test copies it): a class of two (the solution; exp of the raw scores, which loses the
    hidden check) graded by `attnkit autograde`."""
    course = copy_course(fixture_course_root, tmp_path_factory.mktemp("ada-and-cy") / "course")
    with as_course(course):
        from attnkit.mutants import submissions
        sol, raw = solution(), cell(submissions(A)["mistake:no_max_subtracted"], CONTRACT_CELL).source
    _submit(course, "ada", sol)
    _submit(course, "cy", raw)
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return course


def test_csv_of_a_class_graded_by_attnkit_autograde(ada_and_cy, tmp_path, capsys):
    course = copy_course(ada_and_cy, tmp_path / "course")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student("zed")                       # on the roster, submitted nothing
        gb.find_grade(WRITTEN, A, A, "ada").manual_score = 0.5   # a TA graded ada's written answer in formgrader
        gb.db.commit()

    header, rows, err = _export(course)
    assert header == ["student_id", *CHECKS, WRITTEN, "late_penalty", "total", "max"]
    assert sorted(rows) == ["ada", "cy", "zed"]
    for student in ("ada", "cy"):                                # every check: the judge's points, as it recorded them
        marker = json.loads((course / ".attnkit" / "autograde" / A / f"{student}.json").read_text())
        judged = {c["id"]: c["points"] for c in marker["results"][A]["checks"]}
        assert {c: float(rows[student][c]) for c in CHECKS} == judged
    assert float(rows["ada"]["total"]) == MAX_SCORE + 0.5 and rows["ada"][WRITTEN] == "0.5"
    assert 0 < float(rows["cy"]["total"]) < MAX_SCORE and rows["cy"][WRITTEN] == ""    # still awaits a TA: blank
    assert "1 written answer(s) still await a TA" in err
    totals = _gradebook_totals(course)
    for student in ("ada", "cy"):                                # the parts add up to the gradebook's total
        r = rows[student]
        parts = sum(float(r[k]) for k in header[1:-3] if r[k] != "")
        assert parts - float(r["late_penalty"]) == float(r["total"]) == totals[student]
        assert r["max"] == MAX
    assert rows["zed"] == {**{k: "" for k in header}, "student_id": "zed", "max": MAX}   # blank = no grade

    nbgrader("export", cwd=course)                               # and nbgrader's own export says the same totals
    theirs = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv")) if r["assignment"] == A}
    assert {s: float(theirs[s]["score"]) for s in ("ada", "cy")} == {s: float(rows[s]["total"]) for s in ("ada", "cy")}

    out = tmp_path / "grades.csv"                                # --output writes exactly what stdout shows
    capsys.readouterr()
    with as_course(course):
        assert cli.main(["export", A, "--course-dir", str(course), "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert list(csv.DictReader(open(out))) == [rows[s] for s in ("ada", "cy", "zed")]

    # bad usage: exit 2 with a sentence, nothing on stdout
    empty_course = copy_course(course, tmp_path / "empty")       # the same course, its gradebook gone
    (empty_course / "gradebook.db").unlink()
    assert attnkit("new", "week2", cwd=course).returncode == 0     # an assignment of the course, never released
    for args, words in [(["week2", "--course-dir", str(course)], "not in the gradebook"),
                        (["nope", "--course-dir", str(course)], "unknown assignment"),
                        ([A, "--course-dir", str(tmp_path)], "is not an attnkit course"),
                        ([A, "--course-dir", str(empty_course)], "no gradebook")]:
        said = attnkit("export", *args, cwd=course)         # as an instructor runs it, in the course
        assert said.returncode == 2 and words in said.stderr and said.stdout == "", (args, said.stderr)
    assert attnkit("export", A, "--format", "pdf", cwd=course).returncode == 2


def test_csv_of_a_class_graded_by_nbgrader_autograde(fixture_nbgrader_class):
    """The class `nbgrader autograde` graded (tests/fixture_course/fixtures.py), read only: cy normalised the
    columns."""
    course = fixture_nbgrader_class.graded
    _, rows, _ = _export(course)
    with as_course(course):
        judged = grade(course / "submitted" / "cy" / A / f"{A}.ipynb", A)
    assert {c: float(rows["cy"][c]) for c in CHECKS} == {c["id"]: c["points"] for c in judged["checks"]}
    assert float(rows["cy"]["total"]) == judged["score"] == _gradebook_totals(course)["cy"] < MAX_SCORE
    totals = _gradebook_totals(course)                           # and the rest of the class: the gradebook's totals
    assert sorted(rows) == fixture_nbgrader_class.students
    assert {s: float(r["total"]) for s, r in rows.items()} == totals


def test_canvas_csv_follows_canvas_gradebook_import_format(ada_and_cy, tmp_path):
    course = copy_course(ada_and_cy, tmp_path / "course")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student("ada", first_name="Ada", last_name="Lovelace", lms_user_id="4711")
        gb.update_or_create_student("zed")                       # on the roster, submitted nothing
        gb.find_grade(WRITTEN, A, A, "ada").manual_score = 0.5
        gb.db.commit()

    p = attnkit("export", A, "--format", "canvas", cwd=course)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 written answer(s) still await a TA" in p.stderr
    header, points, *students = list(csv.reader(io.StringIO(p.stdout)))
    # Canvas's importer: "Student", "ID" first, "SIS User ID" then "SIS Login ID", "Section" last of the identity
    # columns, then one column per assignment; a second row whose first cell is "Points Possible"
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", A]
    assert points == ["Points Possible", "", "", "", "", MAX]
    rows = {r[3]: r for r in students}                           # keyed by SIS Login ID: nbgrader's student id
    assert sorted(rows) == ["ada", "cy", "zed"] and all(len(r) == len(header) for r in students)
    assert rows["ada"] == ["Lovelace, Ada", "4711", "", "ada", "", f"{MAX_SCORE + 0.5:g}"]   # ID: nbgrader's lms_user_id
    assert rows["cy"][:5] == ["", "", "", "cy", ""] and rows["zed"] == ["", "", "", "zed", "", ""]  # blank: no grade

    totals = _gradebook_totals(course)
    nbgrader("export", cwd=course)
    theirs = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv")) if r["assignment"] == A}
    for student in ("ada", "cy"):                                # the total is the gradebook's, and nbgrader export's
        assert float(rows[student][5]) == totals[student] == float(theirs[student]["score"])
    assert float(theirs["ada"]["max_score"]) == float(points[5])

    # an existing Canvas assignment: its id in the column name; --output writes what stdout shows
    out = tmp_path / "canvas.csv"
    p = attnkit("export", A, "--format", "canvas", "--canvas-assignment-id", "12345", "--output", str(out), cwd=course)
    assert p.returncode == 0 and p.stdout == ""
    again = list(csv.reader(open(out, newline="")))
    assert again[0][-1] == f"{A} (12345)" and again[1:] == [points, *students]
    for args in (["--format", "canvas", "--canvas-assignment-id", "abc"], ["--canvas-assignment-id", "12345"]):
        p = attnkit("export", A, *args, cwd=course)
        assert p.returncode == 2 and p.stdout == "" and "canvas-assignment-id" in p.stderr, (args, p.stderr)


def test_export_has_help():
    p = subprocess.run([sys.executable, "-m", "attnkit", "export", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "usage: attnkit export" in p.stdout and "gradescope" in p.stdout
    assert "canvas" in p.stdout and "--canvas-assignment-id" in p.stdout


def test_an_ungradable_notebook_is_blank_in_every_export(ada_and_cy, tmp_path):
    """zoe's notebook is not valid JSON: nbgrader could not grade it, so she has no score (not a 0), as in the class
    report; ada's and cy's rows are as before."""
    course = copy_course(ada_and_cy, tmp_path / "course")
    (course / "submitted" / "zoe" / A).mkdir(parents=True)
    (course / "submitted" / "zoe" / A / f"{A}.ipynb").write_text('{"cells": [')
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--student", "zoe"], cwd=course, capture_output=True,
                       text=True, timeout=300)
    assert "1 failed" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:       # what makes nbgrader's own total a 0
        assert gb.find_submission(A, "zoe").score == 0
    header, rows, _ = _export(course)
    assert rows["zoe"] == {**{k: "" for k in header}, "student_id": "zoe", "max": MAX}, rows["zoe"]
    assert float(rows["ada"]["total"]) == MAX_SCORE and 0 < float(rows["cy"]["total"]) < MAX_SCORE
    p = attnkit("export", A, "--format", "canvas", cwd=course)
    assert p.returncode == 0, p.stderr[-3000:]
    canvas = {r[3]: r[-1] for r in list(csv.reader(io.StringIO(p.stdout)))[2:]}
    assert canvas["zoe"] == "" and canvas["ada"] == f"{MAX_SCORE:g}", canvas
