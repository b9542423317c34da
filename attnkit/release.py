"""Regenerate what is derived from source/: the paired notebooks, release/ and solutions/.

Steps, in order, per assignment:
  SyncSourceNotebook   source/A/A.pct.py  -> source/A/A.ipynb (no outputs, stable ids)
  GenerateRelease      nbgrader generate_assignment -> release/A/
  StageData            the corpus A's helper verifies, from the data directory -> release/A/ (gitignored)
  ExecuteSolution      run the source notebook -> solutions/A/A.ipynb and A.html

A second release without a source change rewrites no committed byte: the solution runs single-threaded
with fixed hashing, without timing metadata, with streams merged, and a fresh run that differs from
the committed one only in wall-clock durations or object addresses leaves the committed files as they are.
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
from pathlib import Path

import jupytext
import nbformat

from attnkit.engine import registry
from attnkit.engine import datasets
from attnkit.engine import config

from attnkit.course import nbgrader, write_course_config


class ReleaseProblem(ValueError):
    """A source the release refuses (its points and the manifest's disagree); the message is one sentence."""


def source_notebook(pct: Path, points: dict[str, float]):
    """The notebook a jupytext percent script describes, with ids that do not change run to run and each grade
    cell's points from ``points`` (the manifest's, config.points_by_cell: the only place points are written)."""
    nb = jupytext.read(pct)
    graded = {c.metadata["nbgrader"].get("grade_id") for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    if graded != set(points):
        raise ReleaseProblem(f"{pct.name}: its grade cells and the manifest's disagree (grade cells without points: "
                         f"{sorted(graded - set(points)) or 'none'}; points for no grade cell: "
                         f"{sorted(set(points) - graded) or 'none'}): list each grade cell once in the manifest")
    _refuse_prose_points(nb, points, pct.name)
    for i, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{i:03d}"
        if grade_id in points and cell.metadata["nbgrader"].get("grade"):
            cell.metadata["nbgrader"]["points"] = int(points[grade_id]) if points[grade_id] == int(points[grade_id]) \
                else points[grade_id]
        cell.pop("outputs", None) if cell.cell_type != "code" else cell.update(outputs=[], execution_count=None)
    nb.metadata.pop("jupytext", None)
    nb.metadata["jupytext"] = {"formats": "ipynb,.pct.py:percent"}
    nbformat.validate(nb)
    return nb


PROSE_POINTS = re.compile(r"\((\d+(?:\.\d+)?) points?\b")


def _refuse_prose_points(nb, points: dict[str, float], name: str) -> None:
    """The text may tell the student a cell's worth ("(2 points)"), but only as the manifest says: a mention
    counts for the first grade cell at or after it (a hidden check's own comment, the question above a written
    answer), so a manifest edit without the text's is refused, never released."""
    for i, cell in enumerate(nb.cells):
        for said in PROSE_POINTS.findall(cell.source):
            target = next((c.metadata["nbgrader"]["grade_id"] for c in nb.cells[i:]
                           if c.metadata.get("nbgrader", {}).get("grade")), None)
            if target is None or float(said) != points[target]:
                raise ReleaseProblem(f"{name}: cell {i + 1} says a cell is worth {said} but the manifest gives "
                                 f"{target or 'no grade cell after it'} {points.get(target, 0):g}: "
                                 "change the text or the manifest so they agree")


def sync_source(assignment: str, root: Path | None = None) -> Path:
    root = registry.course() if root is None else Path(root)
    src = root / "source" / assignment
    path = src / f"{assignment}.ipynb"
    nbformat.write(source_notebook(src / f"{assignment}.pct.py", config.load(assignment).points_by_cell()), path)
    return path


def generate_release(assignment: str, root: Path | None = None, dest: Path | None = None) -> Path:
    """Run nbgrader generate_assignment in a scratch course; copy the result to dest (default release/A)."""
    root = registry.course() if root is None else Path(root)
    dest = dest or root / "release" / assignment
    with tempfile.TemporaryDirectory(prefix="attnkit-release-") as tmp:
        course = Path(tmp)
        write_course_config(course)
        shutil.copytree(root / "source" / assignment, course / "source" / assignment, symlinks=False)
        nbgrader("generate_assignment", assignment, "--force", cwd=course)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(course / "release" / assignment, dest)
    return dest




def stage_data(assignment: str, root: Path | None = None, dest: Path | None = None, source: Path | None = None) -> list[Path]:
    """Copy the verified corpus into the student's folder (default release/A; .gitignore keeps it out of git)."""
    root = registry.course() if root is None else Path(root)
    dest, source = dest or root / "release" / assignment, source or datasets.data_dir(root=root)
    staged = []
    for name, sha in datasets.needed(assignment, root).items():
        shutil.copyfile(datasets.verified(name, sha, source), dest / name)
        staged.append(dest / name)
    return staged


def kernel_env() -> dict[str, str]:
    """The solution kernel's environment: inline figures and reproducible numbers whatever the caller set."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    # MPLBACKEND=Agg (make release, CI) would reach the kernel and replace its inline backend: plt.show()
    # would then draw nothing. Unset, ipykernel selects matplotlib_inline, as in a notebook server.
    env.pop("MPLBACKEND", None)
    # the notebook's check cell (attnkit_check.py) says the same sentence on every machine: no check service here,
    # whatever the releasing account has set up for itself
    for name in ("ATTNKIT_CHECK_URL", "ATTNKIT_CHECK_TOKEN", "JUPYTERHUB_API_TOKEN"):
        env.pop(name, None)
    env["ATTNKIT_CHECK_FILE"] = os.devnull
    return env


# Output text that differs run to run without the solution changing: wall-clock durations ("runtime=2.4s")
# and object addresses ("<... at 0x7f61...>").
VOLATILE = re.compile(r"(?<=[=\s(])\d+(?:\.\d+)?\s?s\b|\b0x[0-9a-f]{6,}\b")


def masked(nb) -> str:
    """The notebook's JSON with volatile output text masked (outputs only: a source edit always counts)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts = [(output, "text")] + [(output["data"], m) for m in ("text/plain", "text/html")
                                          if m in output.get("data", {})]
            for holder, key in texts:
                if key in holder:           # a string, or a list of lines in a notebook not yet written
                    holder[key] = VOLATILE.sub("<volatile>", "".join(holder[key]))
    return nbformat.writes(nb)


def run_notebook(nb, cwd: Path, timeout: int = 600):
    from nbclient import NotebookClient
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False, coalesce_streams=True,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=kernel_env())
    return nb


def execute_solution(assignment: str, root: Path | None = None, timeout: int = 600) -> Path:
    """Run the source notebook into solutions/A; files are rewritten only when the solution changed."""
    root = registry.course() if root is None else Path(root)
    from nbconvert import HTMLExporter

    src = root / "source" / assignment
    nb = run_notebook(nbformat.read(src / f"{assignment}.ipynb", as_version=4), src, timeout)
    out = root / "solutions" / assignment
    out.mkdir(parents=True, exist_ok=True)
    nb_path, html_path = out / f"{assignment}.ipynb", out / f"{assignment}.html"
    if nb_path.is_file():
        committed = nbformat.read(nb_path, as_version=4)
        if masked(committed) == masked(nb):
            nb = committed                      # the same solution: keep its bytes (and its HTML's)
    _write_if_changed(nb_path, nbformat.writes(nb).rstrip("\n") + "\n")     # as nbformat.write ends a file
    _write_if_changed(html_path, HTMLExporter().from_notebook_node(nb)[0])
    return out


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def dangling_links(folder: Path) -> list[str]:
    """The links under ``folder`` that point nowhere, as 'name -> target' (an assignment copied with `cp -r` from
    another course keeps links relative to that course: the demonstration's corpus.py -> ../../../data/corpus.py)."""
    return sorted(f"{p.relative_to(folder)} -> {os.readlink(p)}" for p in Path(folder).rglob("*")
                  if p.is_symlink() and not p.exists())


def refuse_dangling_links(assignment: str, root: Path) -> None:
    broken = dangling_links(root / "source" / assignment)
    if broken:
        raise ReleaseProblem(f"source/{assignment} has links that point nowhere ({', '.join(broken)}): replace each "
                             f"by a copy of the file it meant (`attnkit new {assignment} --from FOLDER` copies an "
                             f"assignment with its links resolved)")


def check(assignments: list[str], root: Path | None = None, data_dir=None) -> None:
    """What the release refuses, for every assignment, before it writes anything: each script's grade cells
    and points against its manifest (ReleaseProblem), each corpus a student needs (CorpusProblem). So a
    refusal leaves source/, release/ and solutions/ as they were, never half of a release."""
    root = registry.course() if root is None else Path(root)
    for a in assignments:
        refuse_dangling_links(a, root)
        source_notebook(root / "source" / a / f"{a}.pct.py", config.load(a).points_by_cell())
    source = datasets.data_dir(data_dir, root=root)
    for a in assignments:
        for name, sha in datasets.needed(a, root).items():
            datasets.verified(name, sha, source)


def release(assignments: list[str], root: Path | None = None, solutions: bool = True, log=print, data_dir=None) -> None:
    root = registry.course() if root is None else Path(root)
    check(assignments, root, data_dir)
    source = datasets.data_dir(data_dir, root=root)
    for a in assignments:
        log(f"{a}: SyncSourceNotebook -> {sync_source(a, root).relative_to(root)}")
        log(f"{a}: GenerateRelease    -> {generate_release(a, root).relative_to(root)}")
        for path in stage_data(a, root, source=source):
            log(f"{a}: StageData          -> {path.relative_to(root)} (not committed: hand it out with the release)")
        if solutions:
            log(f"{a}: ExecuteSolution    -> {execute_solution(a, root).relative_to(root)}")
