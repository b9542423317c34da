"""`attnkit new NAME` scaffolds an assignment that works with no other edit.

The fixture course (tests/fixture_course/) is exactly that: `attnkit quickstart`, `attnkit new week1`, `attnkit
release week1`, nothing edited. Its released example is graded here as it came (the solution full, a mistake
losing exactly its check, the sample class through stock `nbgrader autograde` into the class report); a copy of
it takes a second and a third assignment (`attnkit new`), to read what `new` says and refuses, and that two
scaffolds keep their mistake ids apart. Commands run as an instructor types them, in the course.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import copy_course
from tests.fixture_course import MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course

NEW = "tiny"
MUTANT, OTHER_MUTANT = "no_max_subtracted", "normalised_over_columns"   # the scaffold's two mistakes


def attnkit(course, *args, status=0):
    """``attnkit ARGS`` in ``course`` (this venv's kit; the course by the current directory)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_RUNS_CHECKOUT")}
    p = subprocess.run([sys.executable, "-m", "attnkit", *args], cwd=course, env=dict(env, OMP_NUM_THREADS="1"),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == status, f"attnkit {' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def course(fixture_course_root, tmp_path_factory):
    """A copy of the fixture course with a second assignment made by `attnkit new` (never released here)."""
    root = copy_course(fixture_course_root, tmp_path_factory.mktemp("new-assignment") / "course")
    return root, attnkit(root, "new", NEW).stdout


def test_new_makes_the_folder_the_link_and_says_what_next(course):
    root, out = course
    folder = root / "autograder" / NEW
    for name in ("manifest.toml", "__init__.py", "plan.py", "drive.py", "checks.py", "evidence.py", "reference.py",
                 "mistakes.py", "mutants.py", f"source/{NEW}.pct.py", f"source/{NEW}.ipynb"):
        assert (folder / name).is_file(), name
        assert f"autograder/{NEW}/{name}" in out, out
    assert (root / "source" / NEW).is_symlink() and (root / "source" / NEW).resolve() == (folder / "source").resolve()
    assert f"attnkit release {NEW}" in out and f"attnkit selfcheck {NEW}" in out
    with as_course(root):
        from attnkit.engine import registry
        assert registry.names() == sorted([A, NEW])


@pytest.mark.parametrize("name, why", [("week-5", "is not a valid assignment name"),
                                        (NEW, f"autograder/{NEW} already exists")])
def test_a_bad_name_is_refused_in_one_sentence_and_makes_nothing(course, name, why):
    root, _ = course
    before = sorted(os.listdir(root / "autograder")), sorted(os.listdir(root / "source"))
    p = attnkit(root, "new", name, status=2)
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1 and why in p.stderr, p.stderr
    assert (sorted(os.listdir(root / "autograder")), sorted(os.listdir(root / "source"))) == before


def test_what_is_not_a_name_and_what_is_taken(course):
    from attnkit.scaffold import refusal
    root, _ = course
    for bad in ("9lives", "Week5", "class", "_private", "a.b", "../x", ""):
        assert "is not a valid assignment name" in refusal(bad, root), bad
    (root / "autograder" / "helpers.py").write_text("")      # a module of autograder/
    try:
        for taken in (A, "helpers"):                          # a folder, and a module of autograder/
            assert "already exists" in refusal(taken, root), taken
    finally:
        (root / "autograder" / "helpers.py").unlink()
    for used in ("judge", "sandbox", "registry", "demo"):    # words the kit's code uses: the guard would fail
        assert "is a name the kit's own code uses" in refusal(used, root), used
    assert refusal("week_5", root) is None


def test_the_release_hides_the_solution_which_gets_full_marks_and_the_mutant_loses_exactly_its_check(
        fixture_course_root, tmp_path):
    root = fixture_course_root
    release = (root / "release" / A / f"{A}.ipynb").read_text()
    assert "NotImplementedError" in release and "BEGIN SOLUTION" not in release and ".max(dim=-1" not in release
    solved = json.loads(attnkit(root, "grade", f"solutions/{A}/{A}.ipynb", "--assignment", A, "--json").stdout)
    assert (solved["score"], solved["max_score"], solved["error"]) == (MAX_SCORE, MAX_SCORE, None), solved
    mutant = tmp_path / "mutant.ipynb"
    with as_course(root):
        import nbformat
        from attnkit.mutants import submissions
        nbformat.write(submissions(A)[f"mistake:{MUTANT}"], mutant)
    graded = json.loads(attnkit(root, "grade", str(mutant), "--assignment", A, "--json").stdout)
    lost = {c["id"]: c for c in graded["checks"] if not c["passed"]}
    assert graded["score"] == MAX_SCORE - 1 and set(lost) == {"reference_agreement"}, graded
    assert "NaN or inf on large scores" in lost["reference_agreement"]["message"]
    assert lost["reference_agreement"]["diagnosis"].startswith("Softmax overflows on large scores")
    assert graded["diagnosis_matches"] == [MUTANT]


def test_each_check_is_lost_alone_by_some_mistake(fixture_course):
    """What `attnkit check` asks of every assignment (plugin_shape.isolating: alone, beside the corpus's ALONGSIDE
    checks); `attnkit selfcheck` on the example is tests/test_cli.py's."""
    from attnkit.engine import config, registry
    from attnkit.plugin_shape import isolating
    alone = isolating(registry.get(A).mutants(), {c.id for c in config.load(A).checks})
    assert dict(alone) == {"rows_sum_to_one": [OTHER_MUTANT], "reference_agreement": [MUTANT]}


def test_nbgrader_autograde_grades_its_demo_class_and_the_class_report_lists_it(fixture_nbgrader_class, tmp_path):
    """The sample class `attnkit demo` grades ([demo.students]), three of them through stock nbgrader (each
    student's kernel run): the solution, the unanswered release, the columns normalised."""
    course = copy_course(fixture_nbgrader_class.graded, tmp_path / "course")
    with as_course(course):
        from attnkit.course import gradebook_scores
        from attnkit.engine import config
        who = {s: what for s, (what, _) in config.load(A).demo["students"].items()}
        scores = gradebook_scores(course, A)
    assert who == {"ada": "correct solution", "ben": "unanswered release", "cy": "normalises the columns",
                   "dee": "forgets to subtract the row maximum", "eve": "correct, written with logsumexp"}
    assert {s: (v["auto"], sorted(v["lost"])) for s, v in scores.items()} == {
        "ada": (MAX_SCORE, []), "ben": (0, ["hidden_reference_agreement", "test_rows_sum_to_one"]),
        "cy": (0, ["hidden_reference_agreement", "test_rows_sum_to_one"])}, scores
    page = (course / attnkit(course, "report", A).stdout.strip()).read_text()
    assert all(s in page for s in ("ada", "ben", "cy")) and "rows do not sum to 1" in page


def test_a_second_scaffold_keeps_its_mistake_ids_apart(course):
    """Mistake ids are an assignment's own: two scaffolds use the same ones, qualified apart where they meet."""
    root, _ = course
    manifest = (root / "autograder" / NEW / "manifest.toml").read_text()
    assert f'"mistake:{MUTANT}"' in manifest and f'"mistake:{OTHER_MUTANT}"' in manifest
    with as_course(root):
        from attnkit.engine.diagnosis import by_id
        ids = sorted(by_id())
    assert f"{A}/{MUTANT}" in ids and f"{NEW}/{MUTANT}" in ids, ids
