"""Red-team findings 1 and 5, on every grading path they apply to.

1. The student's kernel run (nbgrader's pipeline: ``SandboxedExecute``) may hand back any notebook at all,
   e.g. by writing ``out.ipynb`` of the run's scratch first and locking it, or making it a link to the
   instructor's source notebook. It must never become the graded notebook: only outputs of non-grade
   code cells may come from it, validated and capped.
5. Files handed in beside the notebook (links to gradebook.db, to the source notebook, to /dev/zero, a
   FIFO, a huge file) and a notebook that is a link must be copied and read safely by
   `nbgrader autograde`, `nbgrader generate_feedback`, `attnkit autograde` (with and without --execute)
   and Gradescope's run_autograder.

Each case asserts the fair outcome (the points `attnkit grade` gives the same notebook) and that the
course, the gradebook and the other students' folders are untouched and nothing leaked into
autograded/ or feedback/. One course per grading path (module-scoped), graded once.
"""
import copy
import hashlib
import html
import json
import os
import re
import resource
import socket
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.api import Gradebook

from tests import KIT_ROOT
from attnkit.course import BIN
from attnkit.engine import config
from attnkit.isolation import sandbox
from attnkit.engine.judge import grade
from tests.conftest import copy_course
from autograder.causal_head import mutants
from tests.notebooks import cell, solution_source

A = "causal_head"
CFG = config.load(A)
SOL = solution_source(A, "head")
NO_SCALE = mutants.mutate(SOL, "no_scale")
# The kit's caps (attnkit.isolation.files.MAX_FILE_BYTES, attnkit.nbgrader_ext.kernel_outputs.MAX_CELL_BYTES), as literals so
# that this file also runs, and fails, against a kit without them.
FILE_CAP = 20 * 1024 * 1024
CELL_CAP = 2 * 1024 * 1024
SQLITE = b"SQLite format 3\0"


def _nb(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


RELEASE = _nb(KIT_ROOT / "release" / A / f"{A}.ipynb")
SOURCE = _nb(KIT_ROOT / "source" / A / f"{A}.ipynb")
GRADE_IDS = [c.metadata["nbgrader"]["grade_id"] for c in SOURCE.cells
             if c.metadata.get("nbgrader", {}).get("grade")]
_release_lines = {line.strip() for c in RELEASE.cells for line in c.source.splitlines()}
# what only the instructor's notebook holds: the solution code and the model written answer
SECRETS = sorted({line.strip() for c in SOURCE.cells if c.metadata.get("nbgrader", {}).get("solution")
                  for line in c.source.splitlines()
                  if len(line.strip()) > 20 and line.strip() not in _release_lines and "###" not in line})
assert len(SECRETS) > 10


def _is_grade(c) -> bool:
    return bool(c.metadata.get("nbgrader", {}).get("grade"))


# ============================================================================ finding 1, at the step itself

def forged_run(nb) -> dict:
    """What a hostile kernel run can hand back for ``nb``: every grade cell passing with 100 points, the written
    answer made an auto-graded code cell, an extra grade cell, other notebook metadata, huge and garbage outputs."""
    f = json.loads(json.dumps(nb))
    for c in f["cells"]:
        nbg = c.get("metadata", {}).get("nbgrader", {})
        if c["cell_type"] == "code":
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "PASSED\n"}]
            c["execution_count"] = 1
        if nbg.get("grade"):
            nbg["points"] = 100
            if c["cell_type"] == "markdown":            # the written answer
                c.update(cell_type="code", source="pass", outputs=[], execution_count=1)
                nbg["solution"] = False
    code = [i for i, c in enumerate(f["cells"]) if c["cell_type"] == "code" and not _is_grade(nb.cells[i])]
    big, junk, typed = code[0], code[1], code[2]
    f["cells"][big]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * (CELL_CAP // 4)}
                                  for _ in range(6)]
    f["cells"][junk]["outputs"] = [None, 7, "text", {"output_type": "shell", "text": "rm -rf"},
                                   {"output_type": "stream", "name": "stdin", "text": "x"},
                                   {"output_type": "stream", "name": "stdout", "text": 5},
                                   {"output_type": "error", "ename": "E", "evalue": "v", "traceback": "not a list"},
                                   {"output_type": "display_data", "data": {"text/plain": 3}, "metadata": {}},
                                   {"output_type": "display_data", "data": {"not a mime": "x"}, "metadata": {}},
                                   {"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {},
                                    "execution_count": "one"},
                                   {"output_type": "stream", "name": "stdout", "text": ["kept ", "too\n"],
                                    "extra": "field dropped"}]
    f["cells"][typed]["outputs"] = [
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]},
         "metadata": {"image/png": {"width": 10}}},
        {"output_type": "execute_result", "data": {"text/plain": "42", "application/json": {"a": [1, 2]}},
         "metadata": {}, "execution_count": 3},
        {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": ["line 1", "line 2"]}]
    extra = new_code_cell("print('bonus')")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus", "points": 1000, "locked": False,
                                  "solution": False, "schema_version": 3}
    f["cells"].append(json.loads(json.dumps(extra)))
    f["cells"][0] = "not a cell"                        # the intro (markdown): garbage in its place
    f["metadata"]["attnkit"] = {"score": 20}
    f["metadata"]["kernelspec"] = {"name": "evil", "display_name": "evil"}
    return f


def _step(monkeypatch, returned):
    from attnkit.nbgrader_ext.steps import SandboxedExecute
    monkeypatch.setattr(sandbox, "run_notebook", lambda *a, **k: returned)
    nb = copy.deepcopy(RELEASE)
    cell(nb, "head").source = SOL
    before = copy.deepcopy(nb)
    resources = {"metadata": {"path": str(KIT_ROOT / "release" / A)}, "nbgrader": {"assignment": A}}
    out, _ = SandboxedExecute().preprocess(nb, resources)
    return before, out


def _cells_without_outputs(nb):
    return [{k: v for k, v in c.items() if k not in ("outputs", "execution_count")} if isinstance(c, dict) else c
            for c in nb.cells]


def test_the_kernel_runs_notebook_is_never_graded(monkeypatch):
    """SandboxedExecute keeps the submission; from a forged run it takes only valid, capped non-grade outputs."""
    before, out = _step(monkeypatch, None)
    forged = nbformat.from_dict(forged_run(before))       # a NotebookNode, as the kit's run_notebook returned
    before, out = _step(monkeypatch, forged)
    assert _cells_without_outputs(out) == _cells_without_outputs(before)       # sources, ids, metadata, points
    assert out.metadata == before.metadata and len(out.cells) == len(before.cells)
    for c in out.cells:
        if _is_grade(c) and c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, c.metadata["nbgrader"]["grade_id"]
    code = [c for c in out.cells if c.cell_type == "code" and not _is_grade(c)]
    big, junk, typed = code[0], code[1], code[2]
    assert sum(len(o.get("text", "")) for o in big.outputs) <= CELL_CAP
    assert "not shown" in big.outputs[-1].text and len(big.outputs) < 6
    assert [o.output_type for o in junk.outputs] == ["stream", "stream"]
    assert junk.outputs[0] == new_output("stream", name="stdout", text="kept too\n")
    assert "10 output(s)" in junk.outputs[1].text and "not valid" in junk.outputs[1].text
    assert [o.output_type for o in typed.outputs] == ["display_data", "execute_result", "error"]
    assert typed.outputs[0].data == {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
    assert typed.outputs[1].data["application/json"] == {"a": [1, 2]}
    nbformat.validate(out)


def test_a_run_that_differs_or_is_garbage_gives_no_outputs(monkeypatch):
    for returned in (None, "garbage", [1, 2], {"cells": "x"}, {"cells": [None] * 3}, 12):
        before, out = _step(monkeypatch, returned)
        assert _cells_without_outputs(out) == _cells_without_outputs(before)
        assert all(not c.get("outputs") for c in out.cells if c.cell_type == "code"), returned
    before, _ = _step(monkeypatch, None)
    moved = json.loads(json.dumps(before))
    for c in moved["cells"]:
        if c["cell_type"] == "code":
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "from the run\n"}]
    moved["cells"].insert(0, json.loads(json.dumps(new_markdown_cell("shifted"))))     # every position off by one
    _, out = _step(monkeypatch, moved)
    assert not any("from the run" in o.get("text", "") for c in out.cells if c.cell_type == "code" for o in c.outputs)
    edited = json.loads(json.dumps(before))
    target = next(i for i, c in enumerate(edited["cells"]) if c["cell_type"] == "code" and not _is_grade(before.cells[i]))
    edited["cells"][target]["source"] = "print('another source')"
    edited["cells"][target]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "other\n"}]
    _, out = _step(monkeypatch, edited)
    assert out.cells[target].source == before.cells[target].source
    assert "differs from the submission" in out.cells[target].outputs[0].text


def test_a_code_grade_cell_the_judge_does_not_grade_gets_no_free_points(monkeypatch):
    """nbgrader gives full marks to a code grade cell with no output: one the judge does not grade fails closed."""
    from attnkit.nbgrader_ext.steps import SandboxedExecute
    nb = new_notebook(cells=[new_code_cell("assert False")])
    nb.cells[0].metadata["nbgrader"] = {"grade": True, "grade_id": "own_test", "points": 3, "locked": True,
                                        "solution": False, "schema_version": 3}
    forged = json.loads(json.dumps(nb))
    forged["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ok\n"}]
    monkeypatch.setattr(sandbox, "run_notebook", lambda *a, **k: nbformat.from_dict(forged))
    out, _ = SandboxedExecute().preprocess(nb, {"metadata": {"path": "."}, "nbgrader": {"assignment": "not_ours"}})
    from nbgrader.utils import determine_grade
    assert determine_grade(out.cells[0]) == (0, 3)
    assert out.cells[0].outputs[0].output_type == "error" and "TA" in out.cells[0].outputs[0].evalue


# ============================================================================ the class of attackers

def _attack_cell(mode: str, course: Path) -> str:
    """Code a student puts in an ordinary cell: pre-create the run's out.ipynb (forged, locked) or link it."""
    target = str(course / "source" / A / f"{A}.ipynb")
    return f"""import os, json
_here = os.getcwd()
_dirs = [_here, os.path.dirname(_here), os.path.dirname(os.path.dirname(_here)), '/run/attnkit-in', '/tmp']
_forged = None
for _d in _dirs:
    try:
        _forged = json.load(open(os.path.join(_d, 'in.ipynb')))
        break
    except Exception:
        pass
if _forged is not None:
    for _c in _forged['cells']:
        _g = _c.get('metadata', {{}}).get('nbgrader', {{}})
        if _g.get('grade'):
            _g['points'] = 100
            if _c['cell_type'] == 'markdown':
                _c.update(cell_type='code', source='pass', outputs=[], execution_count=1)
                _g['solution'] = False
for _d in _dirs:
    _p = os.path.join(_d, 'out.ipynb')
    try:
        if os.path.lexists(_p):
            os.remove(_p)
        if {mode!r} == 'link':
            os.symlink({target!r}, _p)
        elif _forged is not None:
            with open(_p, 'w') as _f:
                json.dump(_forged, _f)
            os.chmod(_p, 0o444)
        print('planted', _p)
    except OSError as _e:
        print('could not plant', _p, _e)"""


def _write_nb(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _submission(head: str | None, extra_cell: str | None = None, release=RELEASE):
    """``release`` with its Head answered by ``head`` (None: left unanswered) and ``extra_cell`` after it."""
    nb = copy.deepcopy(release)
    head = cell(release, "head").source if head is None else head
    cell(nb, "head").source = head
    if extra_cell:
        nb.cells.insert(nb.cells.index(cell(nb, "head")) + 1, new_code_cell(extra_cell))
    return nb


def populate(course: Path, aside: Path) -> dict:
    """The class: {student: the notebook whose fair grade is what `attnkit grade` gives (saved under ``aside``)}."""
    sub = course / "submitted"
    fair = {}
    made = course / "release" / A / f"{A}.ipynb"          # what this course released, when it did
    release = _nb(made) if made.exists() else RELEASE

    def student(name, nb):
        _write_nb(nb, sub / name / A / f"{A}.ipynb")
        fair[name] = _write_nb(nb, aside / name / f"{A}.ipynb")
        return sub / name / A

    # beside a mistaken Head: links, a FIFO, a socket, a huge file; and a kernel run that hands back a forged,
    # locked out.ipynb (every grade cell 100 points, the written answer made an auto-graded code cell)
    folder = student("linker", _submission(NO_SCALE, _attack_cell("forge", course), release))
    (folder / "helper.py").write_text("HELPER = 1\n")                       # a legitimate file: copied
    (folder / "gradebook.db").symlink_to("../../../gradebook.db")          # every student's grades
    (folder / "notes.txt").symlink_to(f"../../../source/{A}/{A}.ipynb")    # the instructor's solution
    (folder / "zero.bin").symlink_to("/dev/zero")                          # grows a copy without bound
    os.mkfifo(folder / "pipe")                                             # blocks whoever opens it
    (folder / "course").symlink_to("../../..")
    with open(folder / "big.bin", "wb") as f:                              # over the per-file cap (sparse)
        f.truncate(FILE_CAP + 1)
    s, here = socket.socket(socket.AF_UNIX), os.getcwd()
    os.chdir(folder)                    # a socket's address is at most 107 bytes: bound by its name, from its folder
    try:
        s.bind("sock")
    finally:
        os.chdir(here)
        s.close()
    (folder / "data").mkdir()
    (folder / "data" / "ok.txt").write_text("fine\n")
    (folder / "data" / "passwd").symlink_to("/etc/passwd")
    # a notebook that is a link to the instructor's: graded as what it is, nothing of the student's
    (sub / "nblink" / A).mkdir(parents=True)
    (sub / "nblink" / A / f"{A}.ipynb").symlink_to(f"../../../source/{A}/{A}.ipynb")
    fair["nblink"] = _write_nb(new_notebook(), aside / "nblink" / f"{A}.ipynb")
    (sub / "dirlink").mkdir()
    (sub / "dirlink" / A).symlink_to(f"../../source/{A}")                 # the whole folder is the instructor's
    fair["dirlink"] = fair["nblink"]
    # the unanswered release, and a kernel run whose out.ipynb is a link to the instructor's notebook
    student("outlinker", _submission(None, _attack_cell("link", course), release))
    # a Head that writes a malformed result stream from inside the judge's child, and a kernel cell that
    # looks for the course, the gradebook, classmates' folders and root-only files of the host
    student("prowler", _submission(PROWLER_HEAD, _prowler_cell(course), release))
    return fair


PROWLER_HEAD = SOL.replace("class Head(nn.Module):\n", "class Head(nn.Module):\n" + "".join(
    f"    {line}\n" for line in (
        "import json as _j, os as _o, stat as _s, fcntl as _f, struct as _st, sys as _y",
        "_h = _j.dumps({'meta': {'kind': 'loaded', 'error': 'boom', 'notes': 'x'}, 'arrays': {}, 'payload': 0})",
        "if 'ipykernel' not in _y.modules:                  # in the judge's child, not in the kernel",
        "    for _fd in range(3, 256):",
        "        try:",
        "            _m = _o.fstat(_fd).st_mode",
        "            if (_s.S_ISFIFO(_m) or _s.S_ISREG(_m)) and _f.fcntl(_fd, _f.F_GETFL) & 3:",
        "                _o.write(_fd, _st.pack('<Q', len(_h)) + _h.encode())",
        "        except OSError:",
        "            pass",
        "    _o._exit(0)")), 1)


def _prowler_cell(course: Path) -> str:
    paths = ["/etc/shadow", str(course / "gradebook.db"), str(course / "submitted"), str(course / "source"),
             str(KIT_ROOT / "README.md"), "/root/.bashrc", "/home"]
    return f"""import os
_read = []
for _p in {paths!r}:
    try:
        if os.path.isdir(_p):
            _read += [os.path.join(_p, n) for n in os.listdir(_p)]
        else:
            open(_p, 'rb').read(1)
            _read.append(_p)
    except OSError:
        pass
print('KERNEL READ:', _read)"""


def digest(*dirs: Path) -> dict:
    """Every entry under ``dirs``, without following or opening anything but regular files."""
    out = {}
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(d):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                st = p.lstat()
                if stat.S_ISREG(st.st_mode):
                    h = hashlib.sha256()
                    with open(p, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            h.update(block)
                    out[str(p)] = ("file", st.st_size, h.hexdigest())
                elif stat.S_ISLNK(st.st_mode):
                    out[str(p)] = ("link", os.readlink(p))
                else:
                    out[str(p)] = (stat.S_IFMT(st.st_mode),)
    return out


def _limit_files():
    # a copy that follows /dev/zero stops here (SIGXFSZ) instead of filling the disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (512 * 1024 * 1024, 512 * 1024 * 1024))


def _run(cmd, cwd, timeout=420):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONPATH=str(KIT_ROOT))
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       preexec_fn=_limit_files, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}:\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}"
    return p


def nbgrader(course, *args):
    return _run([str(BIN / "nbgrader"), *args], course)


@pytest.fixture(scope="module")
def fair_grades(tmp_path_factory):
    aside = tmp_path_factory.mktemp("aside")
    fair = populate(tmp_path_factory.mktemp("scratch") / "course", aside)
    with ThreadPoolExecutor(2) as ex:
        results = dict(zip(fair, ex.map(lambda p: grade(p, A), fair.values())))
    assert results["linker"]["score"] == 16
    assert results["outlinker"]["score"] == results["nblink"]["score"] == 0
    assert results["prowler"]["score"] == 0 and "could not read" in results["prowler"]["error"]
    return results


PATHS = ["nbgrader autograde", "attnkit autograde", "attnkit autograde --execute"]


@pytest.fixture(scope="module", params=PATHS)
def graded(request, tmp_path_factory, released_course):
    """One course graded by one path (and, for nbgrader's, its feedback generated): what it looked like before.
    Each starts as a copy of the session's course with the assignment generated (tests/conftest.py)."""
    course = copy_course(released_course, tmp_path_factory.mktemp(request.param.replace(" ", "_")) / "course")
    populate(course, tmp_path_factory.mktemp("aside"))
    before = digest(course / "source", course / "release", course / "submitted", KIT_ROOT / "source",
                    KIT_ROOT / "release", KIT_ROOT / "grading_config", KIT_ROOT / "autograder")
    if request.param == "nbgrader autograde":
        nbgrader(course, "autograde", A, "--SandboxedExecute.timeout=20", "--SandboxedExecute.notebook_seconds=60")
        leaks = _autograded_leaks(course)
        # generate_feedback on its own: an autograded/ folder holding links and a FIFO (say, left by an older
        # kit) must not leak through it either
        folder = course / "autograded" / "outlinker" / A
        (folder / "gradebook.db").symlink_to(course / "gradebook.db")
        (folder / "notes.txt").symlink_to(course / "source" / A / f"{A}.ipynb")
        (folder / "zero.bin").symlink_to("/dev/zero")
        os.mkfifo(folder / "pipe")
        nbgrader(course, "generate_feedback", A)
    else:
        _run([sys.executable, "-m", "attnkit", "autograde", A, "--jobs", "2", "--course-dir", str(course)]
             + (["--execute"] if "execute" in request.param else []), KIT_ROOT)
        leaks = _autograded_leaks(course)
    after = digest(course / "source", course / "release", course / "submitted", KIT_ROOT / "source",
                   KIT_ROOT / "release", KIT_ROOT / "grading_config", KIT_ROOT / "autograder")
    return {"path": request.param, "course": course, "before": before, "after": after, "autograded_leaks": leaks}


def _recorded(course) -> dict:
    """student -> grade cell -> (auto score, max score) in the gradebook."""
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for sub in gb.assignment_submissions(A):
            for nb in sub.notebooks:
                for g in nb.grades:
                    out.setdefault(sub.student.id, {})[g.name] = (g.auto_score, g.max_score)
    return out


def _text(p: Path, data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    if p.suffix == ".html":                       # highlighted code is split into spans
        text = html.unescape(re.sub(r"<[^>]*>", "", text))
    elif p.suffix == ".ipynb":
        text = "".join("".join(c.source) for c in nbformat.reads(text, as_version=4).cells)
    return text


def _leaks(folder: Path, student_work: bool = False) -> list:
    """What must never be in a student's autograded/ or feedback/ folder (``student_work``: the student's
    own notebook may hold solution lines, so those are not looked for)."""
    found = []
    if not folder.exists():
        return found
    source_nb = (KIT_ROOT / "source" / A / f"{A}.ipynb").read_bytes()
    for p in folder.rglob("*"):
        st = p.lstat()
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISREG(st.st_mode):
            found.append((p.name, "not a regular file"))
            continue
        if p.name == "gradebook.db" or st.st_size > FILE_CAP:
            found.append((p.name, st.st_size))
            continue
        data = p.read_bytes()
        if data.startswith(SQLITE) or data == source_nb:
            found.append((p.name, "gradebook or source notebook"))
        if not student_work:
            text = _text(p, data)
            found += [(p.name, s) for s in SECRETS if s in text][:1]
    return found


ATTACKERS = ["linker", "nblink", "dirlink", "outlinker"]


def _autograded_leaks(course) -> dict:
    # the linker's notebook is its own (a mistaken solution): its lines are not secrets
    return {s: _leaks(course / "autograded" / s / A, student_work=s == "linker") for s in ATTACKERS}


def test_every_student_gets_the_fair_grade(graded, fair_grades):
    recorded = _recorded(graded["course"])
    cells = CFG.by_cell()
    for student, result in fair_grades.items():
        mine = recorded[student]
        assert sorted(mine) == sorted(GRADE_IDS), (graded["path"], student, sorted(mine))    # no forged cells
        fair = {c["id"]: c["points"] for c in result["checks"]}
        got = {cells[name].id: auto for name, (auto, _) in mine.items() if name in cells}
        assert got == fair, (graded["path"], student)
        assert {name: top for name, (_, top) in mine.items()} == \
               {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
                for c in SOURCE.cells if _is_grade(c)}, (graded["path"], student)             # no forged points
        written = mine["written_trap"][0]
        assert written in (None, 0), (graded["path"], student, written)    # the written answer is never auto-graded


def test_nothing_leaks_into_autograded_or_feedback(graded):
    course = graded["course"]
    assert graded["autograded_leaks"] == {s: [] for s in ATTACKERS}, graded["path"]
    for student in ATTACKERS:
        assert _leaks(course / "feedback" / student / A, student_work=student == "linker") == [], \
            (graded["path"], student)
    linker = course / "autograded" / "linker" / A
    assert (linker / "helper.py").read_text() == "HELPER = 1\n"                # what is fine is still copied
    assert (linker / "data" / "ok.txt").read_text() == "fine\n"
    names = {str(p.relative_to(linker)) for p in linker.rglob("*")}
    refused = {"gradebook.db", "notes.txt", "zero.bin", "pipe", "course", "big.bin", "sock", "data/passwd"}
    assert not names & refused, (graded["path"], names & refused)


def test_the_course_and_other_students_are_untouched(graded):
    assert graded["after"] == graded["before"], graded["path"]
    gb = graded["course"] / "gradebook.db"
    assert stat.S_ISREG(gb.lstat().st_mode) and gb.read_bytes().startswith(SQLITE)
    assert not list(graded["course"].rglob("pwned*"))


def test_feedback_says_what_was_refused(graded):
    if graded["path"] != "nbgrader autograde":
        pytest.skip("feedback is generated on the nbgrader path")
    fb = graded["course"] / "feedback"
    html = (fb / "linker" / A / f"{A}.html").read_text()
    for name in ("gradebook.db", "notes.txt", "zero.bin", "pipe", "big.bin", "sock", "data/passwd", "course"):
        assert f"<code>{name}</code>" in html, name
    assert "not accepted" in html and "symbolic link" in html and "named pipe" in html
    assert "was not graded" in (fb / "nblink" / A / f"{A}.html").read_text()
    # what generate_feedback refused to copy from autograded/outlinker/ (planted there after autograde)
    assert not {p.name for p in (fb / "outlinker" / A).iterdir()} & {"gradebook.db", "notes.txt", "zero.bin", "pipe"}
    assert "not accepted" in (fb / "outlinker" / A / f"{A}.html").read_text()


# ============================================================================ Gradescope's run_autograder

@pytest.fixture(scope="module")
def gradescope_zip(tmp_path_factory):
    from tests.test_gradescope import export_zip
    return export_zip(A, tmp_path_factory.mktemp("zip") / f"{A}.zip")


def _gradescope(zip_path, tmp_path, build):
    from tests.test_gradescope import check_schema, run_autograder, unpack
    root = unpack(zip_path, tmp_path)
    build(root / "submission")

    def state():      # the kit's own grading key (attnkit/engine/secret.py, made on first use) aside
        return {p: v for p, v in digest(root / "source", root / "submission").items() if "/.attnkit" not in p}
    before = state()
    run = run_autograder(root)
    try:
        out = run.communicate(timeout=90)[0]
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, out[-3000:]
    assert state() == before
    res = json.loads((root / "results" / "results.json").read_text())
    check_schema(res)
    return res


def test_gradescope_a_fifo_is_not_a_notebook(gradescope_zip, tmp_path):
    res = _gradescope(gradescope_zip, tmp_path, lambda sub: os.mkfifo(sub / f"{A}.ipynb"))
    assert res["score"] == 0.0 and "No Jupyter notebook" in res["output"]


def test_gradescope_grades_the_notebook_beside_a_fifo_fairly(gradescope_zip, tmp_path):
    nb = _submission(NO_SCALE)

    def build(sub):
        _write_nb(nb, sub / "work" / f"{A}.ipynb")
        os.mkfifo(sub / "other.ipynb")
    res = _gradescope(gradescope_zip, tmp_path, build)
    fair = grade(_write_nb(nb, tmp_path / "aside" / f"{A}.ipynb"), A)
    assert res["score"] == fair["score"] == 16.0
    assert [t["score"] for t in res["tests"]] == [c["points"] for c in fair["checks"]]


def test_the_kernel_run_reads_nothing_of_the_course_or_the_host(graded):
    """Where the student's kernel runs (nbgrader's path and --execute), it sees no course, no classmate,
    no gradebook and no root-only host file; elsewhere the cell never runs."""
    nb = _nb(graded["course"] / "autograded" / "prowler" / A / f"{A}.ipynb")
    printed = "".join("".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code"
                      for o in c.get("outputs", []) if o.get("output_type") == "stream")
    if graded["path"] == "attnkit autograde":
        assert "KERNEL READ" not in printed
    else:
        assert "KERNEL READ: []" in printed, (graded["path"], printed[-500:])
