"""Bad and hostile submissions: each gets a plain word, loses only what it broke, and changes nothing.

All cases are graded in one batch (two at a time) with short limits, like a class.
"""
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from tests import KIT_ROOT
from attnkit.course import BIN
from attnkit.engine.judge import grade
from attnkit.isolation.sandbox import Limits, namespaces_available
from autograder.causal_head import mutants
from tests.notebooks import cell, solution_source, submission

LIMITS = Limits(wall_seconds=40, cpu_seconds=40, memory_mb=6144, seconds_per_experiment=3)
SOL = solution_source("causal_head", "head")
INIT_LINE = "        super().__init__()\n"
FORWARD_LINE = "    def forward(self, x):                                       # x: (B, T, d)\n"
CLASS_LINE = "class Head(nn.Module):\n"
KIT = str(KIT_ROOT)
confined = pytest.mark.skipif(not namespaces_available() and not os.environ.get("CI"),
                              reason="this machine offers no unprivileged namespaces")


def in_init(code, src=SOL):
    return src.replace(INIT_LINE, INIT_LINE + "".join(f"        {l}\n" for l in code.splitlines()))


def in_forward(code, src=SOL):
    return src.replace(FORWARD_LINE, FORWARD_LINE + "".join(f"        {l}\n" for l in code.splitlines()))


def in_class_body(code, src=SOL):
    return src.replace(CLASS_LINE, CLASS_LINE + "".join(f"    {l}\n" for l in code.splitlines()))


def head(src):
    return submission("causal_head", {"head": src})


NO_SCALE = mutants.mutate(SOL, "no_scale")
PATCHES = """import builtins, math, numpy, torch, torch.testing
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
math.isclose = lambda *a, **k: True
builtins.abs = lambda v: 0
for name in list(sys.modules):
    if name.startswith(("autograder", "attnkit")):
        sys.modules[name].__dict__.clear()"""
FS_ATTACK = f"""import os, shutil
for target in ({KIT!r} + '/grading_config/pwned.toml', '../pwned.txt', '../../pwned.txt', 'pwned.txt'):
    try:
        open(target, 'w').write('x')
    except OSError:
        pass
for victim in ({KIT!r} + '/README.md', {KIT!r} + '/autograder/causal_head/manifest.toml'):
    try:
        os.remove(victim)
    except OSError:
        pass
try:
    shutil.rmtree({KIT!r} + '/autograder')
except OSError:
    pass
try:
    open({KIT!r} + '/attnkit/toolkit/reference.py').read()
    causal = 'I read the reference'
except OSError:
    pass"""

SLEEPER = f"4242.{secrets.randbelow(10**6):06d}"    # this run's own orphan: another suite's is not ours
CASES = {
    "syntax_error": head(SOL.replace("def forward(self, x):", "def forward(self, x)")),
    "misspelt_class": head(SOL.replace("class Head(", "class Haed(")),
    "wrong_signature": head(SOL.replace("def __init__(self, d, d_head, T_max, causal=True):", "def __init__(self, d, d_head):")),
    "forward_raises": head(in_forward("raise ValueError('boom')")),
    "wrong_shape": head(SOL.replace("return A @ v ", "return (A @ v).transpose(1, 2) ")),
    "wrong_dtype": head(SOL.replace("return A @ v ", "return (A @ v).double() ")),
    "nan_output": head(SOL.replace("return A @ v ", "return (A @ v) * float('nan') ")),
    "infinite_loop": head(in_forward("while True:\n    pass")),
    "sleep_at_import": head("import time\n" + in_class_body("time.sleep(3600 * 5)")),
    "huge_alloc_forward": head(in_forward("_ = torch.ones(40 * 2**30)")),
    "huge_alloc_import": head(in_class_body("_big = torch.ones(40 * 2**30)")),
    "print_flood": head(in_class_body("print('x' * 50_000_000)", in_forward("print('y' * 50_000_000)"))),
    "sys_exit_import": head("import sys\n" + in_class_body("sys.exit(0)")),
    "os_exit_import": head("import os\n" + in_class_body("os._exit(0)")),
    "sys_exit_forward": head("import sys\n" + in_forward("sys.exit(0)")),
    "os_exit_forward": head("import os\n" + in_forward("os._exit(0)")),
    "orphan_process": head("import subprocess\n" + in_class_body(
        f"_p = subprocess.Popen(['sleep', '{SLEEPER}'], start_new_session=True)")),
    "monkeypatch_wrong_head": head("import sys\n" + in_init(PATCHES, NO_SCALE)),
    "monkeypatch_class_body": head("import sys\n" + in_class_body(PATCHES, NO_SCALE)),
    "no_scale": head(NO_SCALE),
    "fs_attack": head(in_init(FS_ATTACK.replace("causal = ", "self.causal = "))),
    "warnings": head("import warnings\n" + in_forward("warnings.warn('a library warning')")),
}

# Root of the child's user namespace could undo the confinement: unmount the tmpfs over the
# course, remount / writable, or do so from a namespace of its own; and through the machine's
# /proc it could read or write the grader's memory. Any success makes the head wrong.
ESCAPE = f"""import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
with open('/proc/self/mountinfo') as f:
    points = [line.split()[4] for line in f]
def undo():
    for point in reversed(points):
        libc.umount2(point.encode(), 2)
    for point in points:
        libc.mount(None, point.encode(), None, 32 | 4096, None)
    for target in ({KIT!r} + '/pwned.txt', '/pwned.txt', os.path.expanduser('~/pwned.txt')):
        try:
            open(target, 'w').write('x')
        except OSError:
            pass
undo()
try:                      # from a namespace of its own (no process may be started now: that fails first)
    kid = os.fork()
except OSError:
    kid = None
if kid == 0:
    libc.unshare(0x10000000 | 0x20000)
    undo()
    os._exit(0)
if kid:
    os.wait()
escaped = os.path.exists({KIT!r} + '/pwned.txt') or os.path.exists({KIT!r} + '/autograder')
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        escaped |= b'pytest' in open(f'/proc/{{pid}}/cmdline', 'rb').read()
    except OSError:
        pass
if escaped:
    causal = 'escaped'"""
CASES["privilege_escape"] = head(in_init(ESCAPE.replace("    causal = ", "    self.causal = ")))


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in {".venv", ".git", ".pytest_cache", "demo_course", ".attnkit"} or "__pycache__" in rel.parts:
            continue
        h.update(str(rel).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def batch():
    before = _tree_digest(KIT_ROOT)
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as ex:
        timed = lambda nb: (lambda s: (grade(nb, "causal_head", LIMITS), time.monotonic() - s))(time.monotonic())  # noqa: E731
        results = dict(zip(CASES, ex.map(timed, CASES.values())))
    return {"results": results, "elapsed": time.monotonic() - t0, "unchanged": before == _tree_digest(KIT_ROOT)}


def r(batch, name):
    return batch["results"][name][0]


def msgs(result):
    return " | ".join(c["message"] for c in result["checks"] if not c["passed"])


def score_without(result, *ids):
    return sum(c["max_points"] for c in result["checks"] if c["id"] not in ids)


def test_every_case_finishes_within_its_limits(batch):
    for name, (result, seconds) in batch["results"].items():
        assert seconds < LIMITS.wall_seconds + 10, name


@pytest.mark.parametrize("name,score,words", [
    ("syntax_error", 0, "your notebook could not be loaded: syntax error in cell"),
    ("misspelt_class", 0, "class `Head` not found"),
    ("wrong_signature", 0, "__init__ raised TypeError"),
    ("sleep_at_import", 0, "took longer than 3 s"),
    ("huge_alloc_import", 0, "raised RuntimeError"),
    ("sys_exit_import", 0, "called sys.exit(0)"),
    ("os_exit_import", 0, "exited (status 0)"),
])
def test_submission_that_cannot_load_gets_zero_and_a_reason(batch, name, score, words):
    result = r(batch, name)
    assert result["score"] == score and words in msgs(result), msgs(result)


@pytest.mark.parametrize("name,words", [
    ("forward_raises", "forward raised ValueError (at cell"),     # never the message: attnkit/engine/channel.py
    ("infinite_loop", "forward took longer than 3 s (in cell"),
    ("huge_alloc_forward", "forward raised RuntimeError"),
    ("sys_exit_forward", "called sys.exit(0)"),
    ("os_exit_forward", "during this check the submission's process exited (status 0)"),
])
def test_forward_failures_lose_only_the_checks_that_call_forward(batch, name, words):
    result = r(batch, name)
    assert words in msgs(result), msgs(result)
    passed = {c["id"] for c in result["checks"] if c["passed"]}
    assert passed == {"mask_buffer"}        # the one check that never calls forward keeps its point


def test_wrong_shape_dtype_and_nan_are_named(batch):
    assert "shape" in msgs(r(batch, "wrong_shape"))
    dtype = r(batch, "wrong_dtype")
    assert dtype["score"] == score_without(dtype, "interface") and "float64" in msgs(dtype)
    assert "NaN" in msgs(r(batch, "nan_output"))


def test_output_flood_and_warnings_cost_nothing(batch):
    for name in ("print_flood", "warnings"):
        assert r(batch, name)["score"] == 20, msgs(r(batch, name))


def test_monkeypatching_scores_exactly_like_the_same_wrong_head(batch):
    plain = r(batch, "no_scale")
    assert plain["score"] == 16
    for name in ("monkeypatch_wrong_head", "monkeypatch_class_body"):
        assert [c["passed"] for c in r(batch, name)["checks"]] == [c["passed"] for c in plain["checks"]], name


@confined
def test_no_process_outlives_grading(batch):
    """A head whose class body starts a process of its own: it cannot (the code's process may start none),
    is told so, and nothing is left running."""
    result = r(batch, "orphan_process")
    assert result["score"] == 0 and "tried to start another process or thread" in msgs(result), msgs(result)
    left = subprocess.run(["pgrep", "-f", f"sleep {SLEEPER}"], capture_output=True, text=True).stdout
    assert left == "", f"processes left running: {left}"


@confined
def test_the_course_cannot_be_read_written_or_deleted(batch):
    assert r(batch, "fs_attack")["score"] == 20, msgs(r(batch, "fs_attack"))
    assert batch["unchanged"], "grading the batch changed files in the course directory"
    assert not (KIT_ROOT / "grading_config" / "pwned.toml").exists()


@confined
def test_the_child_cannot_undo_its_confinement_or_see_the_grader(batch):
    assert r(batch, "privilege_escape")["score"] == 20, msgs(r(batch, "privilege_escape"))
    assert not (KIT_ROOT / "pwned.txt").exists() and not Path("/pwned.txt").exists()


def test_files_beside_the_notebook_cannot_shadow_packages(tmp_path):
    nb = head(SOL)
    for name in ("torch.py", "numpy.py", "nbformat.py", "attnkit.py", "autograder.py", "framing.py"):
        (tmp_path / name).write_text("raise SystemExit('shadowed')\n")
    nbformat.write(nb, str(tmp_path / "causal_head.ipynb"))
    p = subprocess.run([str(BIN / "attnkit"), "grade", "causal_head.ipynb", "--assignment", "causal_head",
                        "--json", "--course-dir", str(KIT_ROOT)], cwd=tmp_path, capture_output=True, text=True)
    assert json.loads(p.stdout)["score"] == 20, p.stderr[-2000:]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_corrupt_notebooks_get_a_plain_reason(tmp_path):
    bad_json = grade(_write(tmp_path, "a.ipynb", '{"cells": [ '), "causal_head")
    assert bad_json["score"] == 0 and "not valid JSON" in bad_json["error"]
    nb = json.loads(nbformat.writes(head(SOL)))
    nb["nbformat"] = 99
    future = grade(_write(tmp_path, "b.ipynb", json.dumps(nb)), "causal_head")
    assert future["score"] == 0 and "could not be read" in future["error"]


def test_deleted_reordered_duplicated_and_retyped_cells(tmp_path):
    nb = head(SOL)
    only_answer = nbformat.v4.new_notebook(cells=[cell(nb, "setup"), cell(nb, "head")])
    reordered = head(SOL)
    reordered.cells = list(reversed(reordered.cells))
    duplicated = head(SOL)
    duplicated.cells.append(nbformat.v4.new_code_cell(NO_SCALE))      # a later, wrong draft wins, as in Jupyter
    retyped = head(SOL)
    cell(retyped, "head").cell_type = "markdown"
    with ThreadPoolExecutor(2) as ex:
        a, b, c, d = ex.map(lambda n: grade(n, "causal_head"), [only_answer, reordered, duplicated, retyped])
    assert a["score"] == 20 and b["score"] == 20
    assert c["score"] == 16
    assert d["score"] == 0 and "class `Head` not found" in msgs(d)


def test_grading_from_a_directory_inside_the_course(monkeypatch, tmp_path):
    """An instructor grading from a scratch course inside the kit (as make demo does)."""
    (KIT_ROOT / ".scratch").mkdir(exist_ok=True)
    inside = Path(tempfile.mkdtemp(prefix="course-inside-", dir=KIT_ROOT / ".scratch"))   # this test's own
    try:
        monkeypatch.chdir(inside)
        assert grade(head(SOL), "causal_head")["score"] == 20
    finally:
        monkeypatch.undo()
        shutil.rmtree(inside)


LEAVER = """import ctypes, os, signal, subprocess, time
os.setsid()                                     # leave the judge's process group ...
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)          # ... stop dying with the process that started us ...
signal.alarm(0)
signal.signal(signal.SIGALRM, signal.SIG_IGN)   # ... and with our own alarm
time.sleep(3600)"""


@confined
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_a_child_that_leaves_its_group_still_ends_at_its_limit(monkeypatch, zygote):
    monkeypatch.setenv("ATTNKIT_ZYGOTE", zygote)
    limits = Limits(wall_seconds=5, cpu_seconds=40, memory_mb=6144, seconds_per_experiment=2)
    result = grade(head("import sys\n" + in_class_body(LEAVER)), "causal_head", limits)
    assert result["score"] == 0 and "stopped after the 5 s time limit" in msgs(result), msgs(result)
