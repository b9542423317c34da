"""What a student receives is all they need: the release folder and its data file, copied anywhere.

Filled with the solution, it runs top to bottom in a real Jupyter kernel (nbclient, as nbgrader runs
it) from its own folder and from another working directory, without ATTNKIT_DATA_DIR; a folder run
from an unknown directory, without its data or with a damaged copy stops at the first cell that needs
what is missing, with one sentence that names only things the student has.
"""
import os
import re
import shutil
import socket
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests import KIT_ROOT
from attnkit.course import assignments
from attnkit.engine.datasets import needed as corpus_files
from attnkit.release import stage_data

ASSIGNMENTS = assignments()
WITH_DATA = [a for a in ASSIGNMENTS if corpus_files(a)]    # a folder with a corpus beside its notebook
DATA = os.environ.get("ATTNKIT_DATA_DIR")
# Reported as skipped on a developer machine without the corpora; in CI the data must be there.
needs_data = pytest.mark.skipif(not os.environ.get("CI") and not (DATA and all(
    (Path(DATA) / name).is_file() for a in ASSIGNMENTS for name in corpus_files(a))),
    reason="ATTNKIT_DATA_DIR does not hold the corpora")


def student_folder(a: str, dest: Path, data: bool = True) -> Path:
    """release/A as handed out (plus its corpus when ``data``), the notebook's answer cells filled in."""
    dest.mkdir(parents=True)
    corpora = corpus_files(a)
    for path in (KIT_ROOT / "release" / a).iterdir():
        if path.name not in corpora:                  # staged by attnkit release; staged afresh below
            shutil.copy(path, dest / path.name)
    if data:
        stage_data(a, dest=dest, source=Path(DATA))
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source
                 for c in nbformat.read(KIT_ROOT / "source" / a / f"{a}.ipynb", as_version=4).cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(dest / f"{a}.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("solution"):
            c.source = solutions[c.metadata["nbgrader"]["grade_id"]]
    nbformat.write(nb, dest / f"{a}.ipynb")
    return dest


@pytest.fixture(scope="module")
def offline_env():
    """The kernel's environment: no ATTNKIT_DATA_DIR, no hint of the notebook's file, and no network
    (HTTPS through a local port this test holds bound but never listens on, so a download is refused)."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    proxy = f"http://127.0.0.1:{blocker.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATTNKIT_DATA_DIR", "JPY_SESSION_NAME", "no_proxy", "NO_PROXY")}
    env.update(https_proxy=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, HTTP_PROXY=proxy, MPLBACKEND="Agg")
    yield env
    blocker.close()


def client(nb, cwd: Path) -> NotebookClient:
    return NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(cwd)}})


def assert_ran_top_to_bottom(nb):
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "some code cell did not run"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[:1]


def assert_one_plain_sentence(message: str, folder: Path, missing: str = ""):
    """One sentence, and every file, folder and command it names is there for the student."""
    text = re.sub(r"https://\S+?(?=[.,;:)]*(?:\s|$))", "URL", message)    # an address, not a local name
    assert text.endswith(".") and "\n" not in text, message
    assert not re.search(r"[.!?]\s+[A-Z]", text), f"more than one sentence: {message}"
    assert "data/corpus.py" not in text and "data_dir" not in text, message
    for path in re.findall(r"(?<![\w.])/[^\s,:;()`]+", text):
        assert Path(path.rstrip(".")).exists(), f"names {path}, which does not exist: {message}"
    for name in re.findall(r"[\w-]+\.(?:py|txt|ipynb)\b", text):
        assert name == missing or (folder / name).exists(), f"names {name}, which the student lacks: {message}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def get(a: str) -> Path:
        if a not in made:
            made[a] = student_folder(a, tmp_path_factory.mktemp(a) / "student")
        return made[a]
    return get


@needs_data
@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_runs_top_to_bottom_in_its_own_folder(a, folders, offline_env):
    folder = folders(a)
    nb = nbformat.read(folder / f"{a}.ipynb", as_version=4)
    client(nb, folder).execute(env=offline_env)
    assert_ran_top_to_bottom(nb)


@needs_data
@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_runs_top_to_bottom_from_another_directory(a, folders, offline_env, tmp_path):
    """A kernel started elsewhere by a Jupyter server, which names the notebook in JPY_SESSION_NAME."""
    folder = folders(a)
    nb = nbformat.read(folder / f"{a}.ipynb", as_version=4)
    env = dict(offline_env, JPY_SESSION_NAME=str(folder / f"{a}.ipynb"))
    client(nb, tmp_path).execute(env=env)
    assert_ran_top_to_bottom(nb)
    assert not list(tmp_path.iterdir()), "the notebook wrote into the directory it was run from"


@needs_data
@pytest.mark.parametrize("a", WITH_DATA)
def test_each_missing_piece_stops_the_first_cell_that_needs_it(a, offline_env, tmp_path):
    """One kernel walks through the failures in order: unknown folder, missing data, damaged data."""
    folder = student_folder(a, tmp_path / "student", data=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (corpus, _), = corpus_files(a).items()
    nb = nbformat.read(folder / f"{a}.ipynb", as_version=4)
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    c = client(nb, elsewhere)
    with c.setup_kernel(env=offline_env, cwd=str(elsewhere)):
        def run_until_error(cells):
            for i, cell in cells:
                try:
                    c.execute_cell(cell, i)
                except CellExecutionError as e:
                    return i, e
            pytest.fail("every cell ran")

        # 1. Run from a directory that is not the notebook's, with no hint: the first code cell says so.
        i, e = run_until_error(code)
        assert i == code[0][0], f"the first failing cell is cell {i}, not the first code cell"
        assert_one_plain_sentence(e.evalue, folder)
        assert str(elsewhere) in e.evalue and "%cd" in e.evalue, e.evalue
        # VS Code names the notebook in __vsc_ipynb_file__: then the same cell finds its folder.
        c.execute_cell(nbformat.v4.new_code_cell(f"__vsc_ipynb_file__ = {str(folder / f'{a}.ipynb')!r}"), 0)
        # 2. Without the corpus: the first cell that loads it stops, saying where to put it.
        i, e = run_until_error(code)
        assert any(loader in nb.cells[i].source for loader in ("load_text(", "build_corpus(")), \
            f"cell {i} failed, not the cell that loads {corpus}"
        assert_one_plain_sentence(e.evalue, folder, missing=corpus)
        assert str(folder) in e.evalue, f"the message does not say where to put {corpus}: {e.evalue}"
        # 3. A damaged copy: the same cell refuses it and says what to do with it.
        raw = bytearray((Path(DATA) / corpus).read_bytes())
        raw[1000] ^= 1
        (folder / corpus).write_bytes(bytes(raw))
        with pytest.raises(CellExecutionError) as damaged:
            c.execute_cell(nb.cells[i], i)
        assert_one_plain_sentence(damaged.value.evalue, folder)
        assert re.search(r"delete it|replace it", damaged.value.evalue), damaged.value.evalue


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_staged_corpora_are_never_committed(a):
    import subprocess
    for name in corpus_files(a):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"release/{a}/{name}"], cwd=KIT_ROOT)
        assert ignored.returncode == 0, f"release/{a}/{name} is not in .gitignore: it would be committed"


@needs_data
def test_only_a_verified_corpus_is_staged(tmp_path):
    (corpus, _), = corpus_files("attention_lm").items()
    src, dest = tmp_path / "data", tmp_path / "out"
    src.mkdir(), dest.mkdir()
    raw = bytearray((Path(DATA) / corpus).read_bytes())
    (src / corpus).write_bytes(bytes(raw))
    assert stage_data("attention_lm", dest=dest, source=src) == [dest / corpus]
    raw[10] ^= 1
    (src / corpus).write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="not the published"):
        stage_data("attention_lm", dest=dest, source=src)


def _released_module(a: str, name: str, monkeypatch):
    """The helper as released (not the source copy), imported under its own name for this test only."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(f"released_{name}", KIT_ROOT / "release" / a / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)      # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@needs_data
@pytest.mark.parametrize("a, helper, load", [("causal_head", "corpus", lambda m: m.load_text(allow_download=False)),
                                             ("attention_lm", "wordlm", lambda m: m.build_corpus())])
def test_a_damaged_shared_copy_is_not_the_students_to_delete(a, helper, load, tmp_path, monkeypatch):
    """A corpus found through ATTNKIT_DATA_DIR may be the course's shared copy: the student is told to
    ask for a new one, not to delete it."""
    (corpus, _), = corpus_files(a).items()
    raw = bytearray((Path(DATA) / corpus).read_bytes())
    raw[1000] ^= 1
    (tmp_path / corpus).write_bytes(bytes(raw))
    monkeypatch.setenv("ATTNKIT_DATA_DIR", str(tmp_path))
    with pytest.raises((RuntimeError, ValueError)) as refused:       # corpus.CorpusError, wordlm's ValueError
        load(_released_module(a, helper, monkeypatch))
    assert "ask whoever provides" in str(refused.value) and "delete" not in str(refused.value), refused.value
    assert_one_plain_sentence(str(refused.value), tmp_path)


@needs_data
def test_the_doctor_verifies_every_corpus_an_assignment_needs(tmp_path):
    """`attnkit doctor` looks where every command looks and checks each manifest's corpus, not one of them."""
    from attnkit.doctor import check_data
    files = {name for a in ASSIGNMENTS for name in corpus_files(a)}
    for name in files:
        shutil.copyfile(Path(DATA) / name, tmp_path / name)
    ok, text = check_data(tmp_path)
    assert ok and all(name in text for name in files), text
    for name in files:                          # each one missing, then each one altered, is named
        (tmp_path / name).rename(tmp_path / "aside")
        ok, text = check_data(tmp_path)
        assert not ok and f"{name} is not in {tmp_path}" in text, text
        raw = bytearray((tmp_path / "aside").read_bytes())
        raw[0] ^= 1
        (tmp_path / name).write_bytes(bytes(raw))
        ok, text = check_data(tmp_path)
        assert not ok and "not the published" in text and name in text, text
        shutil.copyfile(Path(DATA) / name, tmp_path / name)
