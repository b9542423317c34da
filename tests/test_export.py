"""`attnkit export A --format csv`: per-check points from the gradebook, whichever command graded the class."""
import csv
import io
import json
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook

from attnkit import cli
from attnkit.course import BIN, nbgrader, write_course_config
from attnkit.engine import config
from attnkit.engine.judge import grade
from tests.conftest import copy_course
from attnkit.mutants import module as corpus
from tests.notebooks import cell, solution_source

A = "causal_head"
CHECKS = config.load(A).checks
WRITTEN = "written_trap"


def attnkit(*args, cwd):
    return subprocess.run([sys.executable, "-m", "attnkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _submit(course, student, answer):
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    cell(nb, "head").source = answer
    cell(nb, WRITTEN).source = "Permuting the rows of X moves each position vector with its token."
    dest = course / "submitted" / student / A
    dest.mkdir(parents=True)
    nbformat.write(nb, dest / f"{A}.ipynb")
    return dest / f"{A}.ipynb"


def _export(course) -> tuple[list[str], dict[str, dict], str]:
    p = attnkit("export", A, "--format", "csv", cwd=course)
    assert p.returncode == 0, p.stderr[-3000:]
    reader = csv.DictReader(io.StringIO(p.stdout))
    return reader.fieldnames, {r["student_id"]: r for r in reader}, p.stderr


def _gradebook_totals(course) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(A)}


@pytest.fixture(scope="module")
def ada_and_cy(tmp_path_factory, released_course):
    """Read-only (each test copies it): a class of two (a solution, a mask after the softmax) graded by
    `attnkit autograde`."""
    course = copy_course(released_course, tmp_path_factory.mktemp("ada-and-cy") / "course")
    sol = solution_source(A, "head")
    _submit(course, "ada", sol)
    _submit(course, "cy", corpus(A).mutate(sol, "mask_after_softmax"))
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return course


def test_csv_of_a_class_graded_by_attnkit_autograde(ada_and_cy, tmp_path, capsys):
    course = copy_course(ada_and_cy, tmp_path / "course")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student("zed")                       # on the roster, submitted nothing
        gb.find_grade(WRITTEN, A, A, "ada").manual_score = 1.5   # a TA graded ada's written answer in formgrader
        gb.db.commit()

    header, rows, err = _export(course)
    assert header == ["student_id", *(c.id for c in CHECKS), WRITTEN, "late_penalty", "total", "max"]
    assert sorted(rows) == ["ada", "cy", "zed"]
    for student in ("ada", "cy"):                                # every check: the judge's points, as it recorded them
        marker = json.loads((course / ".attnkit" / "autograde" / A / f"{student}.json").read_text())
        judged = {c["id"]: c["points"] for c in marker["results"][A]["checks"]}
        assert {c.id: float(rows[student][c.id]) for c in CHECKS} == judged
    assert float(rows["ada"]["total"]) == 21.5 and rows["ada"][WRITTEN] == "1.5"
    assert 0 < float(rows["cy"]["total"]) < 20 and rows["cy"][WRITTEN] == ""    # still awaits a TA: blank
    assert "1 written answer(s) still await a TA" in err
    totals = _gradebook_totals(course)
    for student in ("ada", "cy"):                                # the parts add up to the gradebook's total
        r = rows[student]
        parts = sum(float(r[k]) for k in header[1:-3] if r[k] != "")
        assert parts - float(r["late_penalty"]) == float(r["total"]) == totals[student]
        assert r["max"] == "22"
    assert rows["zed"] == {**{k: "" for k in header}, "student_id": "zed", "max": "22"}   # blank = no grade

    nbgrader("export", cwd=course)                               # and nbgrader's own export says the same totals
    theirs = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv")) if r["assignment"] == A}
    assert {s: float(theirs[s]["score"]) for s in ("ada", "cy")} == {s: float(rows[s]["total"]) for s in ("ada", "cy")}

    out = tmp_path / "grades.csv"                                # --output writes exactly what stdout shows
    capsys.readouterr()
    assert cli.main(["export", A, "--course-dir", str(course), "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert list(csv.DictReader(open(out))) == [rows[s] for s in ("ada", "cy", "zed")]

    # bad usage: exit 2 with a sentence, nothing on stdout
    empty_course = tmp_path / "empty"
    empty_course.mkdir()
    write_course_config(empty_course)
    for args, words in [(["attention_lm", "--course-dir", str(course)], "not in the gradebook"),
                        (["nope"], "unknown assignment"), ([A, "--course-dir", str(tmp_path)], "is not an attnkit course"),
                        ([A, "--course-dir", str(empty_course)], "no gradebook")]:
        assert cli.main(["export", *args]) == 2, args
        said = capsys.readouterr()
        assert words in said.err and said.out == "", (args, said.err)
    assert attnkit("export", A, "--format", "pdf", cwd=course).returncode == 2


def test_csv_of_a_class_graded_by_nbgrader_autograde(nbgrader_class):
    """The class `nbgrader autograde` graded (tests/conftest.py), read only: dee forgot the scale."""
    course = nbgrader_class(A).graded
    _, rows, _ = _export(course)
    judged = grade(course / "submitted" / "dee" / A / f"{A}.ipynb", A)
    assert {c.id: float(rows["dee"][c.id]) for c in CHECKS} == {c["id"]: c["points"] for c in judged["checks"]}
    assert float(rows["dee"]["total"]) == judged["score"] == _gradebook_totals(course)["dee"] < 20
    totals = _gradebook_totals(course)                           # and the rest of the class: the gradebook's totals
    assert sorted(rows) == nbgrader_class(A).students
    assert {s: float(r["total"]) for s, r in rows.items()} == totals


def test_canvas_csv_follows_canvas_gradebook_import_format(ada_and_cy, tmp_path):
    course = copy_course(ada_and_cy, tmp_path / "course")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_student("ada", first_name="Ada", last_name="Lovelace", lms_user_id="4711")
        gb.update_or_create_student("zed")                       # on the roster, submitted nothing
        gb.find_grade(WRITTEN, A, A, "ada").manual_score = 1.5
        gb.db.commit()

    p = attnkit("export", A, "--format", "canvas", cwd=course)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 written answer(s) still await a TA" in p.stderr
    header, points, *students = list(csv.reader(io.StringIO(p.stdout)))
    # Canvas's importer: "Student", "ID" first, "SIS User ID" then "SIS Login ID", "Section" last of the identity
    # columns, then one column per assignment; a second row whose first cell is "Points Possible"
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", A]
    assert points == ["Points Possible", "", "", "", "", "22"]
    rows = {r[3]: r for r in students}                           # keyed by SIS Login ID: nbgrader's student id
    assert sorted(rows) == ["ada", "cy", "zed"] and all(len(r) == len(header) for r in students)
    assert rows["ada"] == ["Lovelace, Ada", "4711", "", "ada", "", "21.5"]   # ID: the lms_user_id nbgrader keeps
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
    assert rows["zoe"] == {**{k: "" for k in header}, "student_id": "zoe", "max": "22"}, rows["zoe"]
    assert float(rows["ada"]["total"]) == 20 and 0 < float(rows["cy"]["total"]) < 20
    p = attnkit("export", A, "--format", "canvas", cwd=course)
    assert p.returncode == 0, p.stderr[-3000:]
    canvas = {r[3]: r[-1] for r in list(csv.reader(io.StringIO(p.stdout)))[2:]}
    assert canvas["zoe"] == "" and canvas["ada"] == "20", canvas
