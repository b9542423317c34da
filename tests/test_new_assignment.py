"""`attnkit new NAME` scaffolds an assignment that works with no other edit: on a scratch copy of the kit.

The copy is a clone with the working tree's files over it (tests/test_new_course.py's fresh_clone), shared by
every test here; the new assignment is never made in this checkout. Commands run as an instructor types them
in the copy, with the copy first on PYTHONPATH: only the copy has the new assignment, so a step that ran this
checkout's code instead would not know it.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import KIT_ROOT
from attnkit.course import BIN
from tests.test_new_course import fresh_clone

A = "tiny"
MUTANT, OTHER_MUTANT = "no_max_subtracted", "normalised_over_columns"   # the scaffold's two mistakes


def _env(root):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_RUNS_CHECKOUT")}
    return dict(env, PYTHONPATH=str(root), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")


def run(cmd, cwd, root, status=0):
    p = subprocess.run(cmd, cwd=cwd, env=_env(root), capture_output=True, text=True, timeout=900)
    assert p.returncode == status, \
        f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def attnkit(root, *args, status=0):
    return run([sys.executable, "-m", "attnkit", *args], root, root, status)


def kit_python(root, code, cwd=None):
    """``code`` run by the copy's kit (its registry, corpus, demo)."""
    return run([sys.executable, "-c", code], cwd or root, root).stdout


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    assert not (KIT_ROOT / "autograder" / A).exists(), f"this checkout already has autograder/{A}"
    root = fresh_clone(tmp_path_factory.mktemp("new-assignment") / "kit")
    made = attnkit(root, "new", A).stdout
    assert not (KIT_ROOT / "autograder" / A).exists() and not os.path.lexists(KIT_ROOT / "source" / A)
    return root, made


@pytest.fixture(scope="module")
def released(kit):
    root, _ = kit
    attnkit(root, "release", A)
    return root


def test_new_makes_the_folder_the_link_and_says_what_next(kit):
    root, out = kit
    folder = root / "autograder" / A
    for name in ("manifest.toml", "__init__.py", "plan.py", "drive.py", "checks.py", "evidence.py", "reference.py",
                 "mistakes.py", "mutants.py", f"source/{A}.pct.py", f"source/{A}.ipynb"):
        assert (folder / name).is_file(), name
        assert f"autograder/{A}/{name}" in out, out
    assert (root / "source" / A).is_symlink() and (root / "source" / A).resolve() == (folder / "source").resolve()
    assert f"attnkit release {A}" in out and f"attnkit selfcheck {A}" in out
    assert kit_python(root, "from attnkit.engine import registry; print(registry.names())").strip() == \
        str(["attention_lm", "causal_head", A])


@pytest.mark.parametrize("name, why", [("week-5", "is not a valid assignment name"),
                                        (A, f"autograder/{A} already exists")])
def test_a_bad_name_is_refused_in_one_sentence_and_makes_nothing(kit, name, why):
    root, _ = kit
    before = sorted(os.listdir(root / "autograder")), sorted(os.listdir(root / "source"))
    p = attnkit(root, "new", name, status=2)
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1 and why in p.stderr, p.stderr
    assert (sorted(os.listdir(root / "autograder")), sorted(os.listdir(root / "source"))) == before


def test_what_is_not_a_name_and_what_is_taken(kit):
    from attnkit.scaffold import refusal       # the copy's own scaffold is this checkout's, copied
    root, _ = kit
    for bad in ("9lives", "Week5", "class", "_private", "a.b", "../x", ""):
        assert "is not a valid assignment name" in refusal(bad, root), bad
    (root / "autograder" / "helpers.py").write_text("")      # a module of autograder/ (the demo course has none)
    try:
        for taken in ("causal_head", "helpers"):   # a folder, and a module of autograder/
            assert "already exists" in refusal(taken, root), taken
    finally:
        (root / "autograder" / "helpers.py").unlink()
    for used in ("judge", "sandbox", "registry", "demo"):    # words the kit's code uses: the guard would fail
        assert "is a name the kit's own code uses" in refusal(used, root), used
    assert refusal("week_5", root) is None


def test_release_then_the_solution_gets_full_marks_and_the_mutant_loses_exactly_its_check(released, tmp_path):
    root = released
    release = (root / "release" / A / f"{A}.ipynb").read_text()
    assert "NotImplementedError" in release and "BEGIN SOLUTION" not in release and ".max(dim=-1" not in release
    solved = json.loads(attnkit(root, "grade", f"solutions/{A}/{A}.ipynb", "--assignment", A, "--json").stdout)
    assert (solved["score"], solved["max_score"], solved["error"]) == (2, 2, None), solved
    mutant = tmp_path / "mutant.ipynb"
    kit_python(root, "import nbformat; from attnkit.mutants import submissions; "
                     f"nbformat.write(submissions({A!r})['mistake:{MUTANT}'], {str(mutant)!r})")
    graded = json.loads(attnkit(root, "grade", str(mutant), "--assignment", A, "--json").stdout)
    lost = {c["id"]: c for c in graded["checks"] if not c["passed"]}
    assert graded["score"] == 1 and set(lost) == {"reference_agreement"}, graded
    assert "NaN or inf on large scores" in lost["reference_agreement"]["message"]
    assert lost["reference_agreement"]["diagnosis"].startswith("Softmax overflows on large scores")
    assert graded["diagnosis_matches"] == [MUTANT]


def test_selfcheck_catches_and_names_each_mistake_and_fails_no_correct_one(released):
    out = attnkit(released, "selfcheck", A).stdout
    assert f"{A}: mutation score 2/2 caught (100%), 2/2 with their named diagnosis, false fails 0/2" in out, out
    # what `attnkit check` asks of every assignment: each check lost alone by some mistake
    alone = kit_python(released, "import json; from attnkit.engine import config, registry; "
                                 "from attnkit.plugin_shape import isolating; "
                                 f"print(json.dumps(isolating(registry.get({A!r}).mutants(), "
                                 f"{{c.id for c in config.load({A!r}).checks}})))")
    # a dict, compared as one: the checks are a set, whose order changes with the interpreter's hash seed
    assert json.loads(alone) == {"rows_sum_to_one": [OTHER_MUTANT], "reference_agreement": [MUTANT]}


def test_nbgrader_autograde_grades_its_demo_class_and_the_class_report_lists_it(released, tmp_path):
    root, course = released, tmp_path / "course"
    # the course as `attnkit demo` builds it, and the demo's sample class; two of its students are graded here
    # (nbgrader runs each student's kernel): the solution, and the mistake that only the hidden check sees
    who = kit_python(root, "import json, shutil; from pathlib import Path; from attnkit.engine import registry; KIT_ROOT = registry.course(); "
                           "from attnkit.course import nbgrader, write_course_config; "
                           "from attnkit.demo import sample_class; "
                           f"c = Path({str(course)!r}); c.mkdir(); write_course_config(c); "
                           f"shutil.copytree(KIT_ROOT / 'source' / {A!r}, c / 'source' / {A!r}); "
                           f"nbgrader('generate_assignment', {A!r}, '--force', cwd=c); "
                           f"print(json.dumps(sample_class(c, {A!r})))")
    assert json.loads(who) == {"ada": "correct solution", "ben": "unanswered release", "cy": "normalises the columns",
                               "dee": "forgets to subtract the row maximum", "eve": "correct, written with logsumexp"}
    for student in ("ben", "cy", "eve"):
        (course / "submitted" / student / A / f"{A}.ipynb").unlink()
    run([str(BIN / "nbgrader"), "autograde", A], course, root)
    scores = json.loads(kit_python(root, "import json; from attnkit.course import gradebook_scores; "
                                         f"print(json.dumps(gradebook_scores({str(course)!r}, {A!r})))"))
    # in dee's kernel the hidden cell is a comment and passes: its 0 is the judge's, the copy's kit graded
    assert {s: (v["auto"], v["lost"]) for s, v in scores.items()} == {
        "ada": (2, []), "dee": (1, ["hidden_reference_agreement"])}, scores
    page = (course / attnkit(root, "report", A, "--course-dir", str(course)).stdout.strip()).read_text()
    assert "ada" in page and "dee" in page and "Softmax overflows on large scores" in page


def test_a_second_scaffold_keeps_its_mistake_ids_apart(released):
    """Mistake ids are an assignment's own: two scaffolds use the same ones, qualified apart where they meet."""
    root, other = released, "week_two"
    try:
        attnkit(root, "new", other)
        manifest = (root / "autograder" / other / "manifest.toml").read_text()
        assert f'"mistake:{MUTANT}"' in manifest and f'"mistake:{OTHER_MUTANT}"' in manifest
        ids = kit_python(root, "from attnkit.engine.diagnosis import by_id; print(sorted(by_id()))")
        assert f"'{A}/{MUTANT}'" in ids and f"'{other}/{MUTANT}'" in ids
    finally:
        shutil.rmtree(root / "autograder" / other, ignore_errors=True)
        (root / "source" / other).unlink(missing_ok=True)
