"""`attnkit check A`: every invariant of an assignment in one command, each failure named with its cause.

On the fixture course (tests/fixture_course/: made as an instructor makes one, `attnkit quickstart`, `attnkit new
week1`, `attnkit release week1`): it passes as made, and each test breaks invariants in a copy of it (a check
whose verdict depends on the grading key; a repeated mistake id, a solution line in a released docstring and a
stale release together, being independent) and reads the sentence that names each. The demonstration course's
own run is its test (tests/course/test_check_course.py).
"""
import os
import re
import shutil
import subprocess

import pytest

from attnkit.course import BIN
from tests.fixture_course import NAME as A
SOLUTION_LINE = "return e / e.sum(dim=-1, keepdim=True)"      # a line of the scaffold's solution region


def attnkit(*args, cwd, status=None, timeout=900):
    """The venv's attnkit as an instructor runs it in the course (the course's own key, no checkout on the path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_GRADING_KEY", "PYTEST_ADDOPTS")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    p = subprocess.run([str(BIN / "attnkit"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if status is not None:
        assert p.returncode == status, f"attnkit {' '.join(args)} ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def check(course, keys=0, key_seed=1):
    """`attnkit check` of the fixture assignment; the corpus (``keys`` > 0) only where the test is about it."""
    return attnkit("check", A, "--keys", str(keys), "--key-seed", str(key_seed), "--jobs", "2", cwd=course)


def odd_and_even_key_seed(monkeypatch) -> int:
    """A --key-seed whose two keys give the course's own draw (student "") one odd plan seed and one even."""
    from attnkit.engine.secret import seed_for
    from attnkit.key_dependence import draw_keys
    for key_seed in range(1, 100):
        parities = set()
        for key in draw_keys(2, key_seed):
            monkeypatch.setenv("ATTNKIT_GRADING_KEY", key)
            parities.add(seed_for(A) % 2)
        if parities == {0, 1}:
            return key_seed
    raise AssertionError("no key seed under 100 draws an odd and an even plan seed")


@pytest.fixture
def course(fixture_course_root, tmp_path):
    """A copy of the fixture course of this test's own (its source/ link stays a link)."""
    return shutil.copytree(fixture_course_root, tmp_path / "course", symlinks=True)


@pytest.fixture
def copy(course):
    """The scratch course, for a test to break."""
    return course


def failed(out: str) -> list[str]:
    return re.findall(r"^  FAIL  ([^:]+):", out, flags=re.M)


def test_a_fresh_scaffold_holds_every_invariant(course):
    p = check(course, keys=2)
    assert p.returncode == 0, p.stdout + p.stderr
    oks = re.findall(r"^  ok    (.+?) \(\d+ s\)$", p.stdout, flags=re.M)
    assert oks == ["plug-in", "mistake ids", "checks lost", "no leak", "fresh release", "corpus x 2 keys"], p.stdout
    assert f"{A}: every invariant holds" in p.stdout


def test_a_check_whose_verdict_depends_on_the_key_is_named(copy, monkeypatch):
    """The plan carries its seed, and one check fails on odd seeds: under two keys, the solution loses it under one."""
    plan = copy / "autograder" / A / "plan.py"
    plan.write_text(plan.read_text().replace('"experiments": experiments}', '"experiments": experiments, "seed": seed}'))
    checks = copy / "autograder" / A / "checks.py"
    text = checks.read_text()
    body = '    out = _output(results, "ordinary", plan["tensors"]["scores"])\n'
    assert text.count(body) == 1
    checks.write_text(text.replace(body, body + '    require(plan["seed"] % 2 == 0, "an odd draw")\n'))
    p = check(copy, keys=2, key_seed=odd_and_even_key_seed(monkeypatch))
    assert p.returncode == 1 and failed(p.stdout) == ["corpus x 2 keys"], p.stdout
    line = next(l for l in p.stdout.splitlines() if "solution VARIES with the key" in l)
    assert "listed full marks" in line and "1/2 keys: +rows_sum_to_one" in line, line


def test_a_repeated_mistake_id_a_leaked_solution_line_and_a_stale_release_are_each_named(copy):
    """Three invariants broken in one copy, one `attnkit check` run (10-20 s each here): they
    are independent (the catalogue's ids, the release's helper files, the release notebook's freshness), so each
    is still named with its own cause, as when it is the only one broken.

    A helper released beside the notebook whose docstring repeats a line of the solution: the release carries
    it (nbgrader strips solution regions of the notebook only), and the check names the file and the line."""
    mistakes = copy / "autograder" / A / "mistakes.py"
    mistakes.write_text(mistakes.read_text() + "MISTAKES.append(MISTAKES[0])\n")
    assert SOLUTION_LINE in (copy / "source" / A / f"{A}.pct.py").read_text()
    (copy / "source" / A / "hints.py").write_text(f'"""How softmax_rows ends:\n\n    {SOLUTION_LINE}\n"""\n')
    attnkit("release", A, "--no-solutions", cwd=copy, status=0)
    notebook = copy / "release" / A / f"{A}.ipynb"       # made stale after the release that carries hints.py
    notebook.write_text(notebook.read_text() + "\n")
    p = check(copy)
    assert p.returncode == 1, p.stdout
    assert failed(p.stdout) == ["mistake ids", "no leak", "fresh release"], p.stdout
    assert (f"FAIL  mistake ids: autograder/{A}/mistakes.py: mistake id 'normalised_over_columns' appears 2 times "
            "in the catalogue") in p.stdout, p.stdout
    assert (f"FAIL  no leak: release/{A}/hints.py shows a line of the solution or hidden tests: "
            f"{SOLUTION_LINE!r}") in p.stdout, p.stdout
    assert f"release/{A}/{A}.ipynb differs from a fresh release of source/{A}" in p.stdout, p.stdout


def test_a_driver_of_the_wrong_shape_stops_the_check_at_once(copy):
    drive = copy / "autograder" / A / "drive.py"
    drive.write_text(drive.read_text().replace("def run_experiment(module, exp, tensors, torch, state)",
                                               "def run_experiment(module, exp, tensors, torch)"))
    p = check(copy)
    assert p.returncode == 1 and failed(p.stdout) == ["plug-in"], p.stdout
    assert "skip  corpus (--keys 0)" not in p.stdout
    assert "run_experiment takes 4 arguments, not the 5 the child passes" in p.stdout
    assert "the rest not checked" in p.stdout and "fresh release" not in p.stdout


def test_the_checks_run_as_a_pytest_suite_through_the_kits_plugin(course):
    """The course's autograder/ holds no conftest.py: `pytest -p attnkit.pytest_suite` runs an assignment's checks.py
    on what the judge measured of a notebook (the solution passes both checks, the unanswered release neither)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_GRADING_KEY", "PYTEST_ADDOPTS")}
    for notebook, outcome in ((f"source/{A}/{A}.ipynb", "2 passed"), (f"release/{A}/{A}.ipynb", "2 failed")):
        p = subprocess.run([str(BIN / "python"), "-m", "pytest", "-p", "attnkit.pytest_suite", f"autograder/{A}",
                            "--submission", notebook, "-q", "-p", "no:cacheprovider"],
                           cwd=course, env=env, capture_output=True, text=True, timeout=900)
        assert outcome in p.stdout.splitlines()[-1], p.stdout[-3000:] + p.stderr[-3000:]
