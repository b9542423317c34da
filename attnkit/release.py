"""Regenerate what is derived from source/: the paired notebooks, release/ and solutions/.

Steps, in order, per assignment:
  SyncSourceNotebook   source/A/A.pct.py  -> source/A/A.ipynb (no outputs, stable ids)
  GenerateRelease      nbgrader generate_assignment -> release/A/
  StageData            the corpus A's helper verifies, from the data directory -> release/A/ (gitignored)
  ExecuteSolution      run the source notebook -> solutions/A/A.ipynb and A.html

A second release without a source change rewrites no committed byte: the solution runs single-threaded
with fixed hashing, without timing metadata, with streams merged, and a fresh run that differs from
the committed one only in wall-clock durations or object addresses leaves the committed files as they are.

A release is built whole before it touches the course (Stage), then put in place with the gradebook's record
(Commit); a failure anywhere, a solution cell's included, leaves source/, release/, solutions/ and the
gradebook byte for byte as they were. The solution kernel finds the corpora where every kit command does
(datasets.data_dir: --data-dir, ATTNKIT_DATA_DIR, ../shared/data, data/): it is handed that folder.
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


def generate_release(assignment: str, root: Path | None = None, dest: Path | None = None, notebook=None) -> Path:
    """Run nbgrader generate_assignment in a scratch course; copy the result to dest (default release/A).
    ``notebook``: the source notebook to release in place of source/A/A.ipynb (a release not yet committed)."""
    root = registry.course() if root is None else Path(root)
    dest = dest or root / "release" / assignment
    with tempfile.TemporaryDirectory(prefix="attnkit-release-") as tmp:
        course = Path(tmp)
        write_course_config(course)
        shutil.copytree(root / "source" / assignment, course / "source" / assignment, symlinks=False)
        if notebook is not None:
            nbformat.write(notebook, course / "source" / assignment / f"{assignment}.ipynb")
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


def kernel_env(data_dir: Path | None = None) -> dict[str, str]:
    """The solution kernel's environment: inline figures and reproducible numbers whatever the caller set, and
    the corpora's folder (``data_dir``, absolute) as ATTNKIT_DATA_DIR, the variable every released helper reads."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0",
               # the same instructions on every x86 machine: torch's own kernels, MKL's and oneDNN's otherwise pick
               # the widest the processor has (AVX-512 here, AVX2 elsewhere), and a training cell's printed loss
               # and sampled text then differ between machines (4.077 here, 4.079 where the release was made)
               ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE", ONEDNN_MAX_CPU_ISA="SSE41")
    if data_dir is not None:
        env[datasets.ENV_VAR] = str(Path(data_dir).resolve())
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


def run_notebook(nb, cwd: Path, timeout: int = 600, data_dir: Path | None = None, name: str = "the notebook"):
    """Execute ``nb`` in place; a cell that raises (or a kernel that dies or hangs) is a ReleaseProblem that
    names the notebook, the cell and the exception's type, in one sentence, without the traceback."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False, coalesce_streams=True,
                            resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env=kernel_env(data_dir))
    except CellExecutionError as e:
        raise ReleaseProblem(f"{name}: {_failed_cell(nb)} raised {e.ename}, so nothing was released: run the "
                             f"notebook to see why, fix it and release again") from None
    except CellTimeoutError:
        raise ReleaseProblem(f"{name}: a cell ran longer than the {timeout} s a solution cell may take, so nothing "
                             f"was released: make it faster") from None
    except DeadKernelError:
        raise ReleaseProblem(f"{name}: the kernel died (out of memory, or killed) while running it, so nothing "
                             f"was released") from None
    return nb


def _failed_cell(nb) -> str:
    """'cell N (its grade id or stable id)' of the first cell whose outputs hold an error."""
    for i, cell in enumerate(nb.cells):
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            return f"cell {i + 1} ({cell.get('id', 'no id')})"
    return "a cell"


def solution_files(assignment: str, nb, committed: Path | None) -> dict[str, str]:
    """{file name: text} of solutions/A for the executed notebook ``nb``; a run that differs from the one in
    ``committed`` (the folder solutions/A) only in volatile text keeps the committed bytes."""
    from nbconvert import HTMLExporter
    nb_path = committed / f"{assignment}.ipynb" if committed is not None else None
    if nb_path is not None and nb_path.is_file():
        old = nbformat.read(nb_path, as_version=4)
        if masked(old) == masked(nb):
            nb = old                            # the same solution: keep its bytes (and its HTML's)
    return {f"{assignment}.ipynb": nbformat.writes(nb).rstrip("\n") + "\n",      # as nbformat.write ends a file
            f"{assignment}.html": HTMLExporter().from_notebook_node(nb)[0]}


def execute_solution(assignment: str, root: Path | None = None, timeout: int = 600, data_dir=None,
                     notebook=None, dest: Path | None = None) -> Path:
    """Run the source notebook (or ``notebook``) into dest (default solutions/A); a file is rewritten only when
    the solution changed."""
    root = registry.course() if root is None else Path(root)
    src = root / "source" / assignment
    nb = copy.deepcopy(notebook) if notebook is not None else nbformat.read(src / f"{assignment}.ipynb", as_version=4)
    nb = run_notebook(nb, src, timeout, data_dir, name=f"source/{assignment}/{assignment}.ipynb")
    committed = root / "solutions" / assignment
    out = dest or committed
    out.mkdir(parents=True, exist_ok=True)
    for name, text in solution_files(assignment, nb, committed).items():
        _write_if_changed(out / name, text)
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


def release(assignments: list[str], root: Path | None = None, solutions: bool = True, log=print, data_dir=None,
            gradebook: bool = True) -> None:
    """Stage every assignment's release whole, then commit it with the gradebook's record (``gradebook``): a
    failure at any step leaves the course as it was (ReleaseProblem or CorpusProblem, one sentence)."""
    root = registry.course() if root is None else Path(root)
    check(assignments, root, data_dir)
    source = datasets.data_dir(data_dir, root=root).resolve()
    with tempfile.TemporaryDirectory(prefix="attnkit-stage-") as tmp:
        staged = Path(tmp)
        for a in assignments:
            _stage(a, root, staged / a, source, solutions, log)
        _commit(assignments, root, staged, solutions, gradebook, log)


def _stage(a: str, root: Path, into: Path, source: Path, solutions: bool, log) -> None:
    """Everything a release of ``a`` writes, built under ``into`` (source.ipynb, release/, solutions/); the
    course is only read."""
    nb = source_notebook(root / "source" / a / f"{a}.pct.py", config.load(a).points_by_cell())
    into.mkdir(parents=True)
    nbformat.write(nb, into / "source.ipynb")
    log(f"{a}: SyncSourceNotebook -> source/{a}/{a}.ipynb")
    generate_release(a, root, dest=into / "release", notebook=nb)
    log(f"{a}: GenerateRelease    -> release/{a}")
    for path in stage_data(a, root, dest=into / "release", source=source):
        log(f"{a}: StageData          -> release/{a}/{path.name} (not committed: hand it out with the release)")
    if solutions:
        log(f"{a}: ExecuteSolution    -> solutions/{a} (corpora from {source})")
        execute_solution(a, root, data_dir=source, notebook=nb, dest=into / "solutions")


def _commit(assignments: list[str], root: Path, staged: Path, solutions: bool, gradebook: bool, log) -> None:
    """Put each staged assignment in place and teach the gradebook; on any failure, put back what was there."""
    from attnkit.course import record_in_gradebook
    from attnkit.gradebook import locate
    db = locate(root).path if gradebook else None
    if db is not None and not db.is_absolute():
        db = root / db
    saved = {}                                  # path -> its bytes before the commit (None: it did not exist)
    folders = [root / "release" / a for a in assignments] + \
              ([root / "solutions" / a for a in assignments] if solutions else [])
    backup = staged / ".before"
    for i, folder in enumerate(folders):
        if folder.exists():
            shutil.copytree(folder, backup / str(i), symlinks=True)
    for path in [root / "source" / a / f"{a}.ipynb" for a in assignments] + ([db] if db else []):
        saved[path] = path.read_bytes() if path.is_file() else None
    try:
        for a in assignments:
            _write_if_changed(root / "source" / a / f"{a}.ipynb", (staged / a / "source.ipynb").read_text())
            _replace_folder(root / "release" / a, staged / a / "release")
            if solutions:
                _replace_folder(root / "solutions" / a, staged / a / "solutions")
        if gradebook:
            record_in_gradebook(root, assignments, log=log)
    except BaseException:
        for i, folder in enumerate(folders):
            shutil.rmtree(folder, ignore_errors=True)
            if (backup / str(i)).exists():
                shutil.copytree(backup / str(i), folder, symlinks=True)
        for path, data in saved.items():
            if data is None:
                path.unlink(missing_ok=True)
            elif not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
        raise


def _replace_folder(folder: Path, new: Path) -> None:
    """Make ``folder`` hold exactly ``new``'s files, rewriting only those whose bytes differ (so an unchanged
    file keeps its timestamp and git sees nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    for p in sorted(folder.rglob("*"), reverse=True):
        if p.is_file() and p.relative_to(folder) not in wanted:
            p.unlink()
    for rel in wanted:
        target, data = folder / rel, (new / rel).read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
