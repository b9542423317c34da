"""Per-student, per-check points of a graded class, read from the nbgrader gradebook, as CSV; or the
totals in Canvas's Gradebook import format (``--format canvas``).

nbgrader's own export has one total per student and assignment; an LMS often wants the parts.
Everything comes from the gradebook (each grade cell maps to a check through
``autograder/<assignment>/manifest.toml``), so the file is the same whether the class was graded by
``nbgrader autograde`` or ``attnkit autograde``, and it includes what TAs graded by hand in formgrader.

Blank means "no grade" (never "zero"): a student with no submission gets a row of blank cells, and a
written answer a TA has not graded yet is blank. LMS imports read a blank cell as no grade, so the
LMS's own policy (zero, excused, late) decides, not this file.
"""
from __future__ import annotations

import re
from pathlib import Path

from attnkit.engine import config

from attnkit import safe_csv
from attnkit import gradebook


class ExportError(Exception):
    """A bad request (no gradebook, assignment not graded there), said in one sentence."""


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.10g}"


def _gradebook(course: Path, assignment: str) -> tuple[list[str], list[dict], float, int]:
    """(column names, one record per student of the gradebook, the assignment's maximum, written answers
    still awaiting a TA). A record: id, first_name, last_name, lms_user_id, and for a submission the
    cells (points as text, blank for no grade), late_penalty, total and max; ``cells`` is None without one."""
    from nbgrader.api import MissingEntry

    cfg = config.load(assignment)
    try:
        where = gradebook.locate(course)          # where the course's nbgrader configuration keeps it
    except gradebook.CourseConfigError as e:
        raise ExportError(str(e)) from None
    if not where.exists():
        raise ExportError(f"no gradebook at {where}: grade the class first")
    with gradebook.opened(where) as gb:
        try:
            a = gb.find_assignment(assignment)
        except MissingEntry:
            raise ExportError(f"{assignment!r} is not in the gradebook {where}: generate and grade it first") from None
        cells = {(nb.name, gc.name) for nb in a.notebooks for gc in nb.grade_cells}
        checks = [((cfg.notebook, c.cell), c.id) for c in cfg.checks]
        lost = [cell for (_, cell), _ in checks if (cfg.notebook, cell) not in cells]
        if lost:      # the toml and the graded notebook disagree: a column would silently be blank
            raise ExportError(f"grade cells {', '.join(lost)} of autograder/{assignment}/manifest.toml are not in the "
                              f"gradebook's {cfg.notebook!r}: was the class graded with another configuration?")
        # the grade cells that are not checks: the written answers TAs grade in formgrader
        others = [(k, k[1] if k[0] == cfg.notebook else f"{k[0]}:{k[1]}")
                  for k in sorted(cells - {k for k, _ in checks})]
        columns = checks + others
        records, pending = [], 0
        for student in sorted(gb.students, key=lambda s: s.id):
            record = {"id": student.id, "first_name": student.first_name or "", "last_name": student.last_name or "",
                      "lms_user_id": student.lms_user_id or "", "cells": None, "late_penalty": None,
                      "total": None, "max": a.max_score}
            records.append(record)
            try:
                sub = gb.find_submission(assignment, student.id)
            except MissingEntry:
                continue
            grades = {(nb.name, g.name): g for nb in sub.notebooks for g in nb.grades}
            record["cells"] = []
            written = {key for key, _ in others}
            for key, _ in columns:
                g = grades.get(key)
                ungraded = g is None or (g.manual_score is None and g.auto_score is None)
                # a written answer awaiting a TA (a test cell of a submission nbgrader could not grade is not one)
                pending += bool(key in written and g is not None and ungraded and g.needs_manual_grade)
                record["cells"].append("" if ungraded else _num(g.score))   # a TA's override wins, extra credit in
            if all(g.auto_score is None and g.manual_score is None for g in grades.values()):
                continue            # nbgrader could not grade the notebook (not even read it): no score, not a 0
            penalty = sub.late_submission_penalty or 0.0
            # the total as nbgrader export computes it: the gradebook's sum minus the late penalty, at least 0
            record.update(late_penalty=penalty, total=max(0.0, sub.score - penalty), max=sub.max_score)
        return [name for _, name in columns], records, a.max_score, pending


def grade_table(course: Path, assignment: str) -> tuple[list[str], list[list[str]], int]:
    """(header, rows, written answers still awaiting a TA) for every student of the gradebook."""
    columns, records, _, pending = _gradebook(course, assignment)
    header = ["student_id", *columns, "late_penalty", "total", "max"]
    rows = []
    for r in records:
        if r["cells"] is None:                                  # on the roster, no submission: no grade
            rows.append([r["id"], *[""] * (len(columns) + 2), _num(r["max"])])
        else:
            rows.append([r["id"], *r["cells"], _num(r["late_penalty"]), _num(r["total"]), _num(r["max"])])
    return header, rows, pending


# Canvas's Gradebook import: the identity columns its own export writes and its importer requires, in this
# order (the importer wants "Student" and "ID" first and "Section" last), then one column per assignment,
# "title (canvas id)" or a bare title (a new assignment, or one matched by its title), and a second row
# whose first cell is "Points Possible". A student is matched by ID (Canvas's user id), then SIS User ID,
# then SIS Login ID, then by name. Columns such as "Current Score" are ignored by the importer.
CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_POSSIBLE = "Points Possible"


def canvas_column(assignment: str, canvas_assignment_id: str | None = None) -> str:
    return f"{assignment} ({canvas_assignment_id})" if canvas_assignment_id else assignment


def canvas_table(course: Path, assignment: str, canvas_assignment_id: str | None = None
                 ) -> tuple[list[str], list[list[str]], int]:
    """(header, rows, written answers still awaiting a TA) in Canvas's Gradebook import format.

    One row per student of the gradebook: ``Student`` "Last, First" (blank without names), ``ID`` nbgrader's
    ``lms_user_id`` (Canvas's user id, blank where unknown), ``SIS User ID`` blank (nbgrader has none),
    ``SIS Login ID`` nbgrader's student id, ``Section`` blank, and the total, equal to nbgrader export's
    score (blank without a submission: Canvas leaves that grade alone). The second row holds the maximum."""
    if canvas_assignment_id is not None and not re.fullmatch(r"[0-9]+", canvas_assignment_id):
        raise ExportError(f"--canvas-assignment-id must be the number in the assignment's Canvas address "
                          f"(.../assignments/NUMBER), not {canvas_assignment_id!r}")
    _, records, max_score, pending = _gradebook(course, assignment)
    header = [*CANVAS_IDENTITY, canvas_column(assignment, canvas_assignment_id)]
    rows = [[CANVAS_POINTS_POSSIBLE, "", "", "", "", _num(max_score)]]
    for r in records:
        name = ", ".join(n for n in (r["last_name"], r["first_name"]) if n)
        rows.append([name, r["lms_user_id"], "", r["id"], "", "" if r["total"] is None else _num(r["total"])])
    return header, rows, pending


def to_csv(header: list[str], rows: list[list[str]]) -> str:
    """The table as CSV, formula-safe: an id or name that would start a formula gets a leading ' (safe_csv)."""
    return safe_csv.to_csv([header, *rows], lineterminator="\n")
