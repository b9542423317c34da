"""Source notebooks stay reviewable; the committed release is fresh, leak-free, and fails its own tests."""
import json
import re

import nbformat
import pytest

from attnkit import KIT_ROOT
from attnkit.course import assignments, nbgrader
from attnkit.release import generate_release, source_notebook
from autograder import config

ASSIGNMENTS = assignments()


def _grade_cells(nb):
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")}


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_source_notebook_has_no_outputs(a):
    nb = nbformat.read(KIT_ROOT / "source" / a / f"{a}.ipynb", as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"source/{a}/{a}.ipynb carries outputs in cells {dirty}: run `attnkit release`"


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_source_notebook_matches_its_jupytext_twin(a):
    committed = json.loads((KIT_ROOT / "source" / a / f"{a}.ipynb").read_text())
    fresh = json.loads(nbformat.writes(source_notebook(KIT_ROOT / "source" / a / f"{a}.pct.py")))
    assert committed == fresh, f"source/{a}/{a}.ipynb is stale against {a}.pct.py: run `attnkit release`"


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_grade_cell_points_match_grading_config(a):
    nb = nbformat.read(KIT_ROOT / "source" / a / f"{a}.ipynb", as_version=4)
    cells = {gid: c for gid, c in _grade_cells(nb).items() if c.cell_type == "code"}
    want = {c.cell: c.points for c in config.load(a).checks}
    assert {gid: float(c.metadata["nbgrader"]["points"]) for gid, c in cells.items()} == want


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_source_has_a_manually_graded_written_answer(a):
    nb = nbformat.read(KIT_ROOT / "source" / a / f"{a}.ipynb", as_version=4)
    assert any(c.cell_type == "markdown" and c.metadata["nbgrader"].get("solution")
               for c in _grade_cells(nb).values())


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_committed_release_is_fresh(a, tmp_path):
    fresh = generate_release(a, dest=tmp_path / a)
    committed = KIT_ROOT / "release" / a
    names = sorted(p.name for p in committed.iterdir())
    assert names == sorted(p.name for p in fresh.iterdir())
    for name in names:
        assert (committed / name).read_bytes() == (fresh / name).read_bytes(), \
            f"release/{a}/{name} is stale: run `attnkit release`"


def _solution_and_hidden_lines(a) -> set[str]:
    text = (KIT_ROOT / "source" / a / f"{a}.pct.py").read_text()
    lines = set()
    for begin, end in (("### BEGIN SOLUTION", "### END SOLUTION"), ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")):
        for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), text, flags=re.S):
            lines |= {l.strip().lstrip("# ").strip() for l in block.splitlines()}
    return {l for l in lines if len(l) > 12}        # skip trivial lines such as "super().__init__()"


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_release_leaks_no_solution_or_hidden_line(a):
    secret = _solution_and_hidden_lines(a)
    assert len(secret) > 10
    for path in (KIT_ROOT / "release" / a).iterdir():
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        leaked = [l for l in secret if l in text]
        assert not leaked, f"release/{a}/{path.name} shows {leaked[:3]}"
    assert not list((KIT_ROOT / "release" / a).glob("*.pct.py"))


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_source_validates_and_release_fails_its_own_tests(a):
    # nbgrader validate exits 0 either way: read what it says.
    ok = nbgrader("validate", str(KIT_ROOT / "source" / a / f"{a}.ipynb"), cwd=KIT_ROOT, check=False)
    assert "Success! Your notebook passes all the tests." in ok.stdout, ok.stdout[-2000:]
    bad = nbgrader("validate", str(KIT_ROOT / "release" / a / f"{a}.ipynb"), cwd=KIT_ROOT, check=False)
    assert "VALIDATION FAILED" in bad.stdout, bad.stdout[-2000:]
