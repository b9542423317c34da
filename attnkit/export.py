"""Per-student, per-check points of a graded class, read from the nbgrader gradebook, as CSV.

nbgrader's own export has one total per student and assignment; an LMS often wants the parts.
Everything comes from the gradebook (each grade cell maps to a check through
``grading_config/<assignment>.toml``), so the file is the same whether the class was graded by
``nbgrader autograde`` or ``attnkit autograde``, and it includes what TAs graded by hand in formgrader.

Blank means "no grade" (never "zero"): a student with no submission gets a row of blank cells, and a
written answer a TA has not graded yet is blank. LMS imports read a blank cell as no grade, so the
LMS's own policy (zero, excused, late) decides, not this file.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from autograder import config


class ExportError(Exception):
    """A bad request (no gradebook, assignment not graded there), said in one sentence."""


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.10g}"


def grade_table(course: Path, assignment: str) -> tuple[list[str], list[list[str]], int]:
    """(header, rows, written answers still awaiting a TA) for every student of the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry
    cfg = config.load(assignment)
    db = Path(course) / "gradebook.db"
    if not db.is_file():
        raise ExportError(f"no gradebook in {Path(course).resolve()}: grade the class first")
    with Gradebook(f"sqlite:///{db}") as gb:
        try:
            a = gb.find_assignment(assignment)
        except MissingEntry:
            raise ExportError(f"{assignment!r} is not in the gradebook of {Path(course).resolve()}: "
                              f"generate and grade it first") from None
        cells = {(nb.name, gc.name) for nb in a.notebooks for gc in nb.grade_cells}
        checks = [((cfg.notebook, c.cell), c.id) for c in cfg.checks]
        lost = [cell for (_, cell), _ in checks if (cfg.notebook, cell) not in cells]
        if lost:      # the toml and the graded notebook disagree: a column would silently be blank
            raise ExportError(f"grade cells {', '.join(lost)} of grading_config/{assignment}.toml are not in the "
                              f"gradebook's {cfg.notebook!r}: was the class graded with another configuration?")
        # the grade cells that are not checks: the written answers TAs grade in formgrader
        others = [(k, k[1] if k[0] == cfg.notebook else f"{k[0]}:{k[1]}")
                  for k in sorted(cells - {k for k, _ in checks})]
        columns = checks + others
        header = ["student_id", *(name for _, name in columns), "late_penalty", "total", "max"]
        rows, pending = [], 0
        for student in sorted(gb.students, key=lambda s: s.id):
            try:
                sub = gb.find_submission(assignment, student.id)
            except MissingEntry:
                rows.append([student.id, *[""] * (len(columns) + 2), _num(a.max_score)])
                continue
            grades = {(nb.name, g.name): g for nb in sub.notebooks for g in nb.grades}
            row = [student.id]
            for key, _ in columns:
                g = grades.get(key)
                ungraded = g is None or (g.manual_score is None and g.auto_score is None)
                pending += bool(g is not None and ungraded and g.needs_manual_grade)
                row.append("" if ungraded else _num(g.score))     # score: a TA's override wins, extra credit in
            penalty = sub.late_submission_penalty or 0.0
            # the total as nbgrader export computes it: the gradebook's sum minus the late penalty, at least 0
            row += [_num(penalty), _num(max(0.0, sub.score - penalty)), _num(sub.max_score)]
            rows.append(row)
    return header, rows, pending


def to_csv(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(header)
    out.writerows(rows)
    return buf.getvalue()
