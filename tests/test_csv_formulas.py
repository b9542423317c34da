"""Every CSV the kit writes opens in a spreadsheet as data: a student's text never runs as a formula.

A student controls their exception messages and, on some hubs, their login (nbgrader's student id). A field
that starts with "=" is a formula in LibreOffice Calc (and "+", "-", "@" in Excel and Google Sheets), so the
tests first show real LibreOffice evaluating such a field written by a plain csv.writer, then open the kit's
own files, made by the real commands, in the same LibreOffice: the field is text, the numbers are numbers.
"""
import csv
import re
import subprocess
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from tests import KIT_ROOT
from attnkit.course import BIN
from attnkit.safe_csv import cell
from tests.conftest import copy_course
from tests.fixture_course import CONTRACT_CELL, MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course, in_body, solution
from tests.spreadsheet import evaluate
from tests.test_export import MAX, WRITTEN, _submit

SUM = "=1+2"                                          # a student id: Calc shows 3
LINK = '=HYPERLINK("http://x","y")'                   # an exception message: Calc makes a link
HOSTILE = "mallory"


def test_libreoffice_evaluates_a_formula_a_plain_csv_writer_lets_through(tmp_path):
    """The attack, through the unprotected path: what the kit's writers did before."""
    raw = tmp_path / "raw.csv"
    with open(raw, "w", newline="") as f:
        csv.writer(f).writerows([["student", "message", "points"], [SUM, LINK, "-1"]])
    [[_, row]] = evaluate(raw)
    assert row[0].formula == "of:=1+2" and row[0].value == 3.0            # the id became 3
    assert row[1].formula and "HYPERLINK" in row[1].formula and row[1].value == "y"   # the message became a link


@pytest.mark.parametrize("field", [SUM, LINK, "+1+2", "-1+2", "@SUM(A1:A2)", "\t=1+2", "\r=1+2", "-", "+", "=",
                                   "-inf", "- 3", "-3-"])
def test_a_field_that_would_start_a_formula_gets_a_leading_quote(field):
    # a leading tab or carriage return is also written as its escape (control characters: the test below)
    assert cell(field) == "'" + field.replace("\t", "\\t").replace("\r", "\\r")


@pytest.mark.parametrize("field, shown", [
    ("x\x1b]52;c;aGk=\x07y", "x\\x1b]52;c;aGk=\\x07y"), ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
    ("a\rscore 20 / 20", "a\\rscore 20 / 20"), ("\x9b31m", "\\x9b31m"), ("abc\u202edef", "abc\\u202edef"),
    ("a\u200bb\u2028c\u2029", "a\\u200bb\\u2028c\\u2029"), ("two\nlines", "two\nlines")])
def test_control_and_format_characters_are_written_as_escapes(field, shown):
    """A CSV read in a terminal obeys none of them; a newline stays (the csv module quotes the field)."""
    assert cell(field) == shown


@pytest.mark.parametrize("field", ["ada", "1+2", "a=b", "'=1+2", " =1+2", "3", "-3", "+4", "-1.5", "2e-05", "-0.25",
                                   "1.00E+03", "", None])
def test_ids_text_and_numbers_stay_as_they_are(field):
    assert cell(field) == ("" if field is None else field)


def test_every_csv_the_kit_writes_goes_through_safe_csv():
    """One helper for every writer: no other module of the kit builds CSV itself."""
    writers = []
    for folder in ("attnkit", "autograder", "bench"):
        for p in sorted((KIT_ROOT / folder).rglob("*.py")):
            if p.name != "safe_csv.py" and re.search(r"csv\.(writer|DictWriter)\b", p.read_text()):
                writers.append(str(p.relative_to(KIT_ROOT)))
    assert writers == []


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory, fixture_course_root):
    """A class of the fixture course graded by `attnkit autograde`: student "=1+2" handed in the solution (and a TA
    took a point off the written answer: a negative score), mallory's answer raises LookupError('=HYPERLINK(...)')."""
    course = copy_course(fixture_course_root, tmp_path_factory.mktemp("formulas") / "course")
    with as_course(course):
        sol = solution()
    _submit(course, SUM, sol)
    _submit(course, HOSTILE, in_body(f"raise LookupError('{LINK}')", sol))
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.find_grade(WRITTEN, A, A, SUM).manual_score = -1
        gb.db.commit()
    for fmt in ("csv", "canvas"):
        p = subprocess.run([str(BIN / "attnkit"), "export", A, "--format", fmt, "--output", f"{fmt}.csv"],
                           cwd=course, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    return course


def _texts(rows):
    return [c.value for row in rows for c in row if c.type == "string"]


def test_exports_keep_a_formula_id_as_text_and_numbers_as_numbers(hostile_class):
    plain, canvas = evaluate(hostile_class / "csv.csv", hostile_class / "canvas.csv")
    assert not [c for rows in (plain, canvas) for row in rows for c in row if c.formula]
    # --format csv: the id is shown as written, behind the quote; every score is a number, the TA's -1 too
    header = [c.value for c in plain[0]]
    row = next(r for r in plain if r[0].value == "'" + SUM)
    scores = dict(zip(header[1:], row[1:]))
    assert scores[WRITTEN] == ("float", -1.0, None)
    assert all(c.type == "float" for c in scores.values()) and scores["total"].value == MAX_SCORE - 1
    # --format canvas: the SIS Login ID column holds the quoted id (Canvas cannot match it to the login "=1+2"
    # silently: it shows the row unmatched in its preview); the total is a number
    header = [c.value for c in canvas[0]]
    row = next(r for r in canvas if r[header.index("SIS Login ID")].value == "'" + SUM)
    assert row[header.index(A)] == ("float", MAX_SCORE - 1, None)
    assert canvas[1][-1] == ("float", float(MAX), None)                     # Points Possible


def test_per_check_csv_keeps_a_formula_message_as_text(hostile_class):
    [rows] = evaluate(hostile_class / "autograded" / f"{A}-checks.csv")
    header = [c.value for c in rows[0]]
    mallory = [dict(zip(header, r)) for r in rows[1:] if r[header.index("student")].value == HOSTILE]
    failed = [r for r in mallory if r["passed"].value == "no"]
    # the exception's own text never reaches a message (attnkit/engine/channel.py): its type and line do, as text
    assert failed and all(r["message"].type == "string" and r["message"].formula is None
                          and r["message"].value.startswith(f"{CONTRACT_CELL} raised LookupError (at cell ")
                          and "HYPERLINK" not in r["message"].value for r in failed), failed
    assert not [c for row in rows for c in row if c.formula]
    assert all(r["points"].type == "float" and r["max_points"].type == "float" for r in mallory)
    student_ids = {r[header.index("student")].value for r in rows[1:]}
    assert student_ids == {HOSTILE, "'" + SUM}
