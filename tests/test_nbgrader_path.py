"""`nbgrader autograde` records exactly the points `attnkit grade` gives, in the real gradebook.

On the fixture course (tests/fixture_course/): the preprocessor calls the judge whatever the assignment; `make
demo` walks the demonstration course's classes through the same nbgrader steps (tests/course/test_demo_fresh.py)."""
import csv
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from nbgrader.api import Gradebook

from tests import KIT_ROOT
from attnkit.course import gradebook_scores
from attnkit.engine import config
from attnkit.engine.judge import grade
from tests.fixture_course import NAME as A
from tests.fixture_course.fixtures import as_course

# cy's mistake (the manifest's [demo.students]), the grade cell it loses, words of that check's sentence
CY = ("normalised_over_columns", "test_rows_sum_to_one", "rows do not sum to 1")


def test_autograde_agrees_with_attnkit_grade(fixture_nbgrader_class):
    """The class: ada the solution, ben the unanswered release, cy a mistake, graded by `nbgrader autograde`,
    then `nbgrader generate_feedback` and `nbgrader export`."""
    mistake, lost_cell, words = CY
    course = fixture_nbgrader_class.graded
    students = fixture_nbgrader_class.students
    subs = {s: course / "submitted" / s / A / f"{A}.ipynb" for s in students}
    with as_course(course):
        cfg = config.load(A)
        assert cfg.demo["students"]["cy"][1] == f"mistake:{mistake}"
        cells = cfg.by_cell()
        with ThreadPoolExecutor(2) as ex:                       # each grade is its own child process
            direct = dict(zip(subs, ex.map(lambda p: grade(p, A), subs.values())))
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in subs:
            nb = gb.find_submission_notebook(A, A, student)
            recorded = {cells[g.name].id: g.auto_score for g in nb.grades if g.name in cells}
            assert recorded == {c["id"]: c["points"] for c in direct[student]["checks"]}, student
    scores = gradebook_scores(course, A)
    assert sorted(scores) == students
    assert scores["ada"]["auto"] == scores["ada"]["max"] == cfg.max_score
    assert scores["ben"]["auto"] == 0
    assert lost_cell in scores["cy"]["lost"]

    # feedback is generated and shows the judge's sentence, not hidden test source
    html = (course / "feedback" / "cy" / A / f"{A}.html").read_text()
    assert words in html and "BEGIN HIDDEN TESTS" not in html and "attnkit judges" not in html
    assert "What went wrong:" in html and len(re.findall(r"class=[\"']heatmap[\"']", html)) == 2  # the report leads

    # the stock export still works on this gradebook
    rows = {r["student_id"]: r for r in csv.DictReader(open(course / "grades.csv"))}
    assert float(rows["ada"]["raw_score"]) == cfg.max_score and float(rows["ben"]["raw_score"]) == 0.0


def test_the_course_config_leaves_the_judge_to_the_steps_that_grade():
    """Every nbgrader command loads the course's configuration, which names attnkit's steps: importing the judge
    there (torch) cost each generate_assignment, db, generate_feedback and export seconds of CPU for nothing."""
    code = ("import sys\nfrom traitlets.config.loader import PyFileConfigLoader\n"
            f"c = PyFileConfigLoader('nbgrader_config.py', path={str(KIT_ROOT / 'grading_config')!r}).load_config()\n"
            "print([p.__name__ for p in c.Autograde.autograde_preprocessors])\n"
            "print(sorted(m for m in ('torch', 'attnkit.engine.judge', 'attnkit.isolation.sandbox') if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=KIT_ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    steps, imported = p.stdout.splitlines()
    assert "SandboxedExecute" in steps and "JudgeGradeCells" in steps, steps     # the steps are configured ...
    assert imported == "[]", imported                                           # ... and the judge not imported
