"""Source notebooks stay reviewable; the committed release is fresh, leak-free, and fails its own tests."""
import functools
import json
import re
import shutil

import nbformat
import pytest

from tests import KIT_ROOT
from attnkit.course import assignments, nbgrader
from attnkit.engine.datasets import needed as corpus_files
from attnkit.release_leaks import leaks, secret_lines
from attnkit.release import PROSE_POINTS, execute_solution, generate_release, masked, source_notebook
from attnkit.engine import config

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
    fresh = json.loads(nbformat.writes(source_notebook(KIT_ROOT / "source" / a / f"{a}.pct.py", config.load(a).points_by_cell())))
    assert committed == fresh, f"source/{a}/{a}.ipynb is stale against {a}.pct.py: run `attnkit release`"


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_points_are_written_only_in_the_manifest(a):
    """The percent script carries no points; the notebook nbgrader reads has the manifest's, on every grade cell."""
    assert '"points"' not in (KIT_ROOT / "source" / a / f"{a}.pct.py").read_text()
    nb = nbformat.read(KIT_ROOT / "source" / a / f"{a}.ipynb", as_version=4)
    got = {gid: float(c.metadata["nbgrader"]["points"]) for gid, c in _grade_cells(nb).items()}
    assert got == config.load(a).points_by_cell()
    assert {gid for gid, c in _grade_cells(nb).items() if c.cell_type == "code"} == {c.cell for c in config.load(a).checks}


def test_a_grade_cell_the_manifest_does_not_list_is_refused(tmp_path):
    pct = tmp_path / "t.pct.py"
    pct.write_text('# %% nbgrader={"grade": true, "grade_id": "test_x", "locked": true, "schema_version": 3, '
                   '"solution": false, "task": false}\nassert True\n')
    assert source_notebook(pct, {"test_x": 2}).cells[0].metadata["nbgrader"]["points"] == 2
    with pytest.raises(ValueError, match="grade cells without points: \\['test_x'\\]"):
        source_notebook(pct, {})
    with pytest.raises(ValueError, match="points for no grade cell: \\['test_y'\\]"):
        source_notebook(pct, {"test_x": 2, "test_y": 1})



@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_points_the_text_tells_the_student_are_the_manifests(a, tmp_path):
    """Every "(N points)" in the notebook's text is the manifest's for the grade cell it speaks of; after a
    manifest edit that the text does not follow, the release is refused."""
    pct, points = KIT_ROOT / "source" / a / f"{a}.pct.py", config.load(a).points_by_cell()
    source_notebook(pct, points)
    said = [m for m in PROSE_POINTS.finditer(pct.read_text())]
    assert said, f"{a}: the text tells no cell's points (nothing to test here)"
    nb = source_notebook(pct, points)
    first = next(i for i, c in enumerate(nb.cells) if PROSE_POINTS.search(c.source))
    target = next(c.metadata["nbgrader"]["grade_id"] for c in nb.cells[first:]
                  if c.metadata.get("nbgrader", {}).get("grade"))
    with pytest.raises(ValueError, match=f"cell {first + 1} says a cell is worth .* but the manifest gives {target} 7"):
        source_notebook(pct, {**points, target: 7})


def test_a_points_mention_after_the_last_grade_cell_is_refused(tmp_path):
    pct = tmp_path / "t.pct.py"
    pct.write_text('# %% nbgrader={"grade": true, "grade_id": "test_x", "locked": true, "schema_version": 3, '
                   '"solution": false, "task": false}\nassert True  # (2 points)\n\n# %% [markdown]\n# A bonus (1 point)\n')
    with pytest.raises(ValueError, match="says a cell is worth 1 but the manifest gives no grade cell after it"):
        source_notebook(pct, {"test_x": 2})

def test_a_refused_assignment_stops_the_release_before_any_file_is_written(tmp_path, monkeypatch, capsys):
    """`attnkit release A B` whose B's text and manifest disagree on points: one sentence, and A's source,
    release and solutions are as they were (not half released)."""
    from attnkit import cli, release as release_module
    from attnkit.engine import datasets
    root = tmp_path / "kit"
    for a in ASSIGNMENTS:
        shutil.copytree(KIT_ROOT / "source" / a, root / "source" / a)
    last = ASSIGNMENTS[-1]
    pct = root / "source" / last / f"{last}.pct.py"
    text = pct.read_text()
    said = PROSE_POINTS.search(text)
    pct.write_text(text[:said.start()] + "(7 points" + text[said.end():])      # the text now promises 7
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    monkeypatch.setenv("ATTNKIT_DATA_DIR", str(datasets.data_dir()))
    monkeypatch.setattr(release_module, "release", functools.partial(release_module.release, root=root))
    assert cli.main(["release", *ASSIGNMENTS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnkit release: ") and "says a cell is worth 7" in err and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before     # nothing written
    assert not (root / "release").exists() and not (root / "solutions").exists()


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_source_has_the_manually_graded_written_answer_its_manifest_names(a):
    """The written answer the manifest's [demo.written] names is a manually graded markdown cell, and there is no
    other (an assignment without a written answer, such as one `attnkit new` makes, names none and has none)."""
    nb = nbformat.read(KIT_ROOT / "source" / a / f"{a}.ipynb", as_version=4)
    written = {gid for gid, c in _grade_cells(nb).items()
               if c.cell_type == "markdown" and c.metadata["nbgrader"].get("solution")}
    named = config.load(a).demo.get("written", {}).get("cell")
    assert written == ({named} if named else set())


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_committed_release_is_fresh(a, tmp_path):
    fresh = generate_release(a, dest=tmp_path / a)
    committed = KIT_ROOT / "release" / a
    # the corpus attnkit release stages beside the notebook is gitignored, not part of what is committed
    names = sorted(p.name for p in committed.iterdir() if p.name not in corpus_files(a))
    assert names == sorted(p.name for p in fresh.iterdir())
    for name in names:
        assert (committed / name).read_bytes() == (fresh / name).read_bytes(), \
            f"release/{a}/{name} is stale: run `attnkit release`"


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_release_leaks_no_solution_or_hidden_line(a):
    secret = secret_lines(KIT_ROOT / "source" / a / f"{a}.pct.py")
    assert secret, "the scan found no solution or hidden line"      # a small assignment has a few
    assert leaks(KIT_ROOT / "release" / a, secret, skip=set(corpus_files(a))) == {}


def test_a_solution_line_in_a_released_docstring_is_a_leak(tmp_path):
    """The scan can fail: a helper whose docstring repeats a solution line, and a percent script, are found."""
    pct = tmp_path / "t.pct.py"
    pct.write_text("# %%\n### BEGIN SOLUTION\nscores = q @ k.transpose(-2, -1)\n### END SOLUTION\n")
    release = tmp_path / "release"
    release.mkdir()
    (release / "helper.py").write_text('"""Attention.\n\n    scores = q @ k.transpose(-2, -1)\n"""\n')
    assert leaks(release, secret_lines(pct)) == {"helper.py": ["scores = q @ k.transpose(-2, -1)"]}
    (release / "helper.py").write_text('"""Attention: compute the scores yourself."""\n')
    assert leaks(release, secret_lines(pct)) == {}
    (release / "t.pct.py").write_text("")
    assert list(leaks(release, secret_lines(pct))) == ["t.pct.py"]


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_source_validates_and_release_fails_its_own_tests(a):
    # nbgrader validate exits 0 either way: read what it says.
    ok = nbgrader("validate", str(KIT_ROOT / "source" / a / f"{a}.ipynb"), cwd=KIT_ROOT, check=False)
    assert "Success! Your notebook passes all the tests." in ok.stdout, ok.stdout[-2000:]
    bad = nbgrader("validate", str(KIT_ROOT / "release" / a / f"{a}.ipynb"), cwd=KIT_ROOT, check=False)
    assert "VALIDATION FAILED" in bad.stdout, bad.stdout[-2000:]


# ---------------------------------------------------------------- solutions you can trust

# A call to any of these draws a figure the solution must show (plt.show, ax.imshow, plt.subplots,
# the pipeline maps' show_pipeline, ...).
FIGURE_CALLS = {"show", "imshow", "plot", "subplots", "figure", "show_pipeline"}


def _figure_cells(nb):
    import ast
    found = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
                 for n in ast.walk(ast.parse(c.source)) if isinstance(n, ast.Call)}
        if calls & FIGURE_CALLS:
            found.append((i, c))
    return found


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_every_figure_cell_of_a_committed_solution_has_its_image(a):
    nb = nbformat.read(KIT_ROOT / "solutions" / a / f"{a}.ipynb", as_version=4)
    cells = _figure_cells(nb)
    assert cells, f"solutions/{a}: no figure cell found; FIGURE_CALLS is out of date"
    blank = [i for i, c in cells if not any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert not blank, f"solutions/{a}/{a}.ipynb: figure cells {blank} have no image: run `attnkit release`"


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_committed_solution_shows_no_object_address_or_timing(a):
    text = (KIT_ROOT / "solutions" / a / f"{a}.ipynb").read_text()
    assert not re.search(r"at 0x[0-9a-f]{6,}", text), f"solutions/{a} prints an object's address"
    assert '"iopub.execute_input"' not in text, f"solutions/{a} records execution timestamps"


TINY = """\
import time
import matplotlib.pyplot as plt
start = time.perf_counter()
for i in range(3):                  # three writes: separate stream messages, merged in one output
    print("step", i, flush=True)
    time.sleep(0.05)
print(object())                     # "<object object at 0x7f...>"
print(f"runtime={time.perf_counter() - start + (time.time_ns() % 997) / 1000:.3f}s")
plt.plot([0, 1], [1, 0]); plt.show()
"""


def test_a_second_solution_run_rewrites_no_byte_and_keeps_figures(tmp_path, monkeypatch):
    """Two real runs of a notebook with every kind of volatility seen in the course's solutions:
    execution timestamps, split streams, an object address, a wall-clock duration; the environment's
    MPLBACKEND=Agg (as `make release` sets it) must not cost the figure."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    src = tmp_path / "source" / "tiny"
    src.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TINY)]), src / "tiny.ipynb")
    out = execute_solution("tiny", root=tmp_path, timeout=120)
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    nb = nbformat.read(out / "tiny.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for o in nb.cells[0].outputs), "the figure was dropped"
    assert [o.output_type for o in nb.cells[0].outputs].count("stream") == 1
    execute_solution("tiny", root=tmp_path, timeout=120)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


def test_a_real_change_in_a_solution_is_never_masked():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(x)")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="loss=4.078 runtime=2.4s\n")]
    twin = nbformat.from_dict(json.loads(nbformat.writes(nb)))
    twin.cells[0].outputs[0].text = "loss=4.078 runtime=35.0s\n"
    assert masked(nb) == masked(twin)
    twin.cells[0].outputs[0].text = "loss=4.079 runtime=2.4s\n"
    assert masked(nb) != masked(twin)
    twin = nbformat.from_dict(json.loads(nbformat.writes(nb)))
    twin.cells[0].source = "print(y)"
    assert masked(nb) != masked(twin)
