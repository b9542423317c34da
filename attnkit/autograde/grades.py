"""What the parent reads from and enters in the gradebook around a run (the workers write grades through
nbgrader's own converter)."""
from __future__ import annotations

from attnkit.gradebook import Location, opened


def read_grades(where: Location, assignment: str) -> dict[str, dict[tuple[str, str], dict]]:
    """student -> {(notebook, grade cell): grade fields} for ``assignment``.

    One query (walking nbgrader's objects loads each grade lazily: about 0.3 s per class of 50 here).
    """
    from nbgrader.api import Assignment, BaseCell, Grade, Notebook, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy import select
    query = (select(SubmittedAssignment.student_id, Notebook.name, BaseCell.name, Grade.auto_score,
                    Grade.manual_score, Grade.max_score, Grade.cell_type, Grade.needs_manual_grade)
             .select_from(Grade)
             .join(BaseCell, Grade.cell_id == BaseCell.id)
             .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
             .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
             .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
             .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
             .where(Assignment.name == assignment))          # as Gradebook.assignment_submissions
    out: dict[str, dict] = {}
    with opened(where) as gb:
        for student, nb, cell, auto, manual, max_score, cell_type, needs in gb.db.execute(query):
            out.setdefault(student, {})[(nb, cell)] = {
                "auto_score": auto, "manual_score": manual, "max_score": max_score, "cell_type": cell_type,
                "needs_manual_grade": needs}
    return out


def enter_students(where: Location, students: list[str]) -> None:
    """Enter new students in the gradebook in sorted order, as sequential `nbgrader autograde` would
    (its export lists students in that order), before the workers finish in whatever order."""
    from nbgrader.api import MissingEntry
    with opened(where) as gb:
        for s in sorted(students):
            try:
                gb.find_student(s)
            except MissingEntry:
                gb.add_student(s)
