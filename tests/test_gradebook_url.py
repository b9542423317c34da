"""A course whose nbgrader_config.py keeps the gradebook elsewhere (`c.CourseDirectory.db_url`): every command a
TA runs reads and writes that gradebook, and none makes a `gradebook.db` in the course folder. On the fixture
course's assignment (tests/fixture_course/)."""
import csv
import io
import shutil
import subprocess

import nbformat
import pytest
from nbgrader.api import Gradebook

from attnkit import cli, export, gradebook
from attnkit.course import BIN, write_course_config
from attnkit.engine import config, registry
from attnkit.mutants import submissions
from tests.fixture_course import COURSE_ID, MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course

STUDENTS = {"ada": "solution", "cy": "mistake:no_max_subtracted"}
FULL = f"{MAX_SCORE} / {MAX_SCORE}"


def attnkit(*args, cwd):
    return subprocess.run([str(BIN / "attnkit"), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def _course(root, db_file=None, like=None):
    """A course graded as the fixture course ``like`` is, with its source; its gradebook at ``db_file`` (a path,
    or the text after sqlite:///)."""
    like = like or registry.course()
    root.mkdir(parents=True)
    write_course_config(root, like)
    if db_file is not None:
        with open(root / "nbgrader_config.py", "a") as f:
            f.write(f"c.CourseDirectory.db_url = {'sqlite:///' + str(db_file)!r}\n")
    shutil.copytree(like / "source" / A, root / "source" / A)
    return root


@pytest.fixture(scope="module")
def graded(tmp_path_factory, fixture_course_root):
    """(course, gradebook file outside it, autograde's output): two students graded by `attnkit autograde`,
    which also records the assignment in the (not yet existing) gradebook first."""
    base = tmp_path_factory.mktemp("elsewhere")
    db_file = base / "grades" / "class.db"
    db_file.parent.mkdir()
    course = _course(base / "course", db_file, fixture_course_root)
    with as_course(fixture_course_root):
        subs = submissions(A)
    for student, name in STUDENTS.items():
        (course / "submitted" / student / A).mkdir(parents=True)
        nbformat.write(subs[name], course / "submitted" / student / A / f"{A}.ipynb")
    p = attnkit("autograde", A, "--jobs", "2", cwd=course)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return course, db_file, p.stdout


def _totals(db_file) -> dict[str, float]:
    with Gradebook(f"sqlite:///{db_file}", COURSE_ID) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(A)}


def test_the_configured_url_is_the_one_found(tmp_path, fixture_course):
    db_file = tmp_path / "somewhere" / "g.db"
    found = gradebook.locate(_course(tmp_path / "course", db_file))
    assert (found.url, found.path, found.course_id, found.exists()) == (f"sqlite:///{db_file}", db_file, COURSE_ID,
                                                                        False)
    assert str(found) == str(db_file)                        # what messages name: the file, not the URL
    plain = gradebook.locate(_course(tmp_path / "plain"))    # nbgrader's default: <root>/gradebook.db
    assert plain.url == f"sqlite:///{tmp_path / 'plain' / 'gradebook.db'}"
    relative = gradebook.locate(_course(tmp_path / "relative", "grades/g.db"))   # from the root, as nbgrader runs
    assert relative.path == tmp_path / "relative" / "grades" / "g.db"


def test_a_missing_configured_gradebook_is_named_where_it_is_configured(tmp_path, fixture_course):
    db_file = tmp_path / "somewhere" / "g.db"
    course = _course(tmp_path / "course", db_file)
    with pytest.raises(export.ExportError, match=f"no gradebook at {db_file}"):
        export.grade_table(course, A)
    with pytest.raises(gradebook.NoGradebook):               # opening to read never creates it empty
        with gradebook.opened(gradebook.locate(course)):
            pass
    assert not db_file.exists() and not (course / "gradebook.db").exists()


def test_every_command_uses_the_configured_gradebook(graded, fixture_course, monkeypatch, capsys):
    course, db_file, autograde_out = graded
    assert f"gradebook: {db_file}" in autograde_out
    totals = _totals(db_file)
    assert totals["ada"] == MAX_SCORE and 0 < totals["cy"] < MAX_SCORE, totals

    p = attnkit("report", A, cwd=course)                     # the program itself, run in the course ...
    assert p.returncode == 0, p.stderr[-3000:]
    page = (course / "reports" / f"{A}-class-report.html").read_text()
    assert FULL in page and f"{totals['cy']:g} / {MAX_SCORE}" in page

    monkeypatch.chdir(course)                                # ... and the others through its entry point, there
    capsys.readouterr()
    assert cli.main(["export", A]) == 0, capsys.readouterr().err
    rows = {r["student_id"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert {s: float(r["total"]) for s, r in rows.items()} == totals
    assert sum(float(rows["cy"][c.id]) for c in config.load(A).checks) == totals["cy"]

    assert cli.main(["export", A, "--format", "canvas"]) == 0, capsys.readouterr().err
    canvas = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert {r["SIS Login ID"]: float(r[A]) for r in canvas if r["SIS Login ID"]} == totals

    cli.main(["doctor", "--course-dir", str(course)])       # other checks may fail on this machine: not ours
    out = capsys.readouterr().out
    line = next((ln for ln in out.splitlines() if " gradebook " in ln), out)
    assert line.startswith("ok ") and f"{db_file} knows {A}" in line, out

    assert not list(course.rglob("gradebook.db")), "a command made a gradebook in the course folder"
