"""The judge reads and parses a submitted notebook inside limits, and honest notebooks keep their marks.

An attacker's notebook (millions of constants, expressions nested 100 000 deep, a 300 MB file) is
graded 0 with one plain sentence while the judge's own memory stays where it was; an honest one with
IPython magics, a long constant or big figures is graded as usual.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests import KIT_ROOT
from attnkit.isolation import untrusted
from attnkit.engine.judge import grade
from attnkit.isolation.untrusted import TOO_BIG_TO_PARSE, UnreadableNotebook, student_code
from tests.notebooks import solution_source, submission, write

SOL = solution_source("causal_head", "head")


def _graded_zero(result, message):
    assert result["score"] == 0 and result["error"] == message, result.get("error")
    assert all(c["message"] == message and not c["passed"] for c in result["checks"])


def test_notebook_of_constants_scores_zero_and_the_judge_stays_small(tmp_path):
    """8 MB of `X = [1,1,1,...]` (4 million literals): 4.2 GB in ast.parse. The helper hits its cap."""
    nb = submission("causal_head", {"head": SOL})
    nb.cells.insert(1, new_code_cell("X = [" + "1," * 4_000_000 + "]\n"))
    path = write(nb, tmp_path / "constants.ipynb")
    probe = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {str(KIT_ROOT)!r})
        from attnkit.engine.judge import grade
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = grade({str(path)!r}, "causal_head")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"result": result, "grown_mib": (after - before) / 1024}}))
    """)
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.splitlines()[-1])
    _graded_zero(out["result"], TOO_BIG_TO_PARSE)
    assert out["grown_mib"] < 64, f"the judge's own peak memory grew by {out['grown_mib']:.0f} MiB"
    assert time.monotonic() - t < 60


def test_nbgrader_node_of_constants_scores_zero(monkeypatch):
    """The nbgrader path hands the judge a node it has already read: extracted inside the same caps
    (here a budget of 128 MiB, so that a million literals exceed it at once)."""
    monkeypatch.setattr(untrusted, "MEMORY_BUDGET_BYTES", 128 << 20)
    nb = submission("causal_head", {"head": SOL + "\nX = [" + "1," * 1_000_000 + "]\n"})
    _graded_zero(grade(nb, "causal_head"), TOO_BIG_TO_PARSE)


@pytest.mark.parametrize("expr", ["a" + ".b" * 100_000, "-" * 100_000 + "1", "f" + "()" * 100_000,
                                  "not " * 100_000 + "x"])
def test_deeply_nested_code_scores_zero(expr):
    """RecursionError or MemoryError inside ast.parse: the submission's failure, never a crash of the judge."""
    nb = submission("causal_head", {"head": SOL})
    nb.cells.insert(1, new_code_cell(f"x = {expr}\n"))
    _graded_zero(grade(nb, "causal_head"), TOO_BIG_TO_PARSE)


def test_huge_file_is_refused_by_its_size_before_any_byte_is_read(tmp_path):
    path = tmp_path / "huge.ipynb"
    with open(path, "wb") as f:          # sparse: 300 MB of NUL bytes that would be "not valid JSON" if read
        f.truncate(300 << 20)
    t = time.monotonic()
    result = grade(path, "causal_head")
    assert time.monotonic() - t < 2
    _graded_zero(result, "the notebook is too large to grade (300 MB; the limit is 64 MB)")


def test_huge_code_is_refused_by_its_size_before_parsing():
    nb = new_notebook(cells=[new_code_cell("S = '" + "a" * (17 << 20) + "'\n")])
    with pytest.raises(UnreadableNotebook, match=r"^the notebook's code is too large to grade \(17 MB of code; "
                                                 r"the limit is 16 MB\)$"):
        student_code(nb)


def test_a_parse_past_its_time_is_killed(monkeypatch):
    monkeypatch.setattr(untrusted, "SECONDS", 0.2)
    nb = new_notebook(cells=[new_code_cell("X = [" + ", ".join(repr(i / 7) for i in range(400_000)) + "]\n")])
    t = time.monotonic()
    with pytest.raises(UnreadableNotebook,
                       match=r"^the notebook took longer than 0.2 s to read and parse \(the limit\)$"):
        student_code(nb)
    assert time.monotonic() - t < 2


def test_a_fault_of_the_reader_itself_is_the_kits(monkeypatch):
    def broken(cells):
        raise KeyError("a bug in the kit")
    monkeypatch.setattr(untrusted, "USE_READER", False)        # the forked helper sees the patch
    monkeypatch.setattr(untrusted, "extract_cells", broken)
    with pytest.raises(RuntimeError, match="a fault of the kit"):
        student_code(new_notebook(cells=[new_code_cell("x = 1\n")]))


def test_both_routes_give_what_extract_gives(tmp_path, monkeypatch):
    """A node goes to the reader, a file (or a node while the reader is busy) to a forked helper."""
    from attnkit.isolation.notebook_code import extract
    nb = submission("causal_head", {"head": "%matplotlib inline\n" + SOL})
    want = extract(nb)
    assert student_code(nb) == want                                       # the reader
    assert student_code(write(nb, tmp_path / "a.ipynb")) == want          # a helper, from the file
    monkeypatch.setattr(untrusted, "USE_READER", False)
    assert student_code(nb) == want                                       # a helper, from the node


def test_a_reader_that_refused_is_replaced_and_one_that_died_too(monkeypatch):
    honest = submission("causal_head", {"head": SOL})
    student_code(honest)
    first = untrusted._reader.pid
    with pytest.raises(UnreadableNotebook):
        student_code(new_notebook(cells=[new_code_cell("x = " + "-" * 100_000 + "1\n")]))
    assert untrusted._reader is None                         # it said goodbye: the next request starts afresh
    assert "class Head" in student_code(honest).source
    second = untrusted._reader.pid
    assert second != first
    os.kill(second, signal.SIGKILL)           # dies while idle: replaced, nobody is blamed
    time.sleep(0.2)
    assert "class Head" in student_code(honest).source and untrusted._reader.pid != second


def test_threads_grade_at_once(monkeypatch):
    """Three threads: one holds the reader, the others fork helpers; each gets its own notebook's code."""
    from concurrent.futures import ThreadPoolExecutor
    forked, in_helper = [], untrusted._in_helper
    monkeypatch.setattr(untrusted, "_in_helper", lambda *a: forked.append(1) or in_helper(*a))
    nbs = [new_notebook(cells=[new_code_cell(f"X{i} = [{', '.join(['1.5'] * 100_000)}]\nclass Head{i}:\n    pass\n")])
           for i in range(6)]
    with ThreadPoolExecutor(3) as ex:
        codes = list(ex.map(student_code, nbs))
    assert 0 < len(forked) < 6                  # both routes served
    assert all(f"class Head{i}:" in c.source and f"Head{j}:" not in c.source
               for i, c in enumerate(codes) for j in range(6) if j != i)


def test_long_constants_pass_extraction():
    """A 3 MB string literal and 200 000 floats in a definitions cell are honest, and within the caps."""
    text = "ab" * 1_500_000
    floats = ", ".join(repr(i * 0.123456789) for i in range(200_000))
    nb = submission("causal_head", {"head": f"TEXT = {text!r}\nTABLE = [{floats}]\n" + SOL})
    code = student_code(nb)
    assert code.problems == [] and f"TEXT = {text!r}" in code.source and "class Head" in code.source
    assert code.where(code.source.splitlines().index("class Head(nn.Module):") + 1).startswith("cell ")


def test_a_20_mb_notebook_of_figures_grades_in_full(tmp_path):
    """Outputs are never parsed as code: big figures cost a student nothing."""
    nb = submission("causal_head", {"head": SOL})
    png = base64.b64encode(os.urandom(3 << 20)).decode()             # 4 MB each
    for c in [c for c in nb.cells if c.cell_type == "code"][:5]:
        c.outputs = [new_output("display_data", data={"image/png": png})]
    path = write(nb, tmp_path / "figures.ipynb")
    assert path.stat().st_size > 20e6
    result = grade(path, "causal_head")
    assert result["score"] == result["max_score"] == 20, result["error"]


IPYTHON_HEAD = """%matplotlib inline
!pip install -q numpy
files = !ls
res = %timeit -o -n 1 -r 1 sum(range(10))
np?
torch.nn.Linear??
""" + SOL + """
%time _ = 1
?Head
"""


def test_magics_and_shell_lines_cost_no_point():
    """Valid IPython in the answer cell, cell magics around it: the solution keeps every point."""
    nb = submission("causal_head", {"head": IPYTHON_HEAD})
    at = nb.cells.index(next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "head"))
    nb.cells[at + 1:at + 1] = [
        new_code_cell("%%time\nimport math\nSCALE = 1 / math.sqrt(4)\n"),
        new_code_cell("%%capture out\n!nvidia-smi\nprint('hidden')\n"),
        new_code_cell("%%writefile head.py\nclass Head:\n    pass\n"),      # not Python: no Head here
        new_code_cell("%%bash\necho 'class Head: pass'\nclass Head:\n"),
        new_markdown_cell("%%time is a cell magic"),
    ]
    result = grade(nb, "causal_head")
    assert result["score"] == 20, [(c["id"], c["message"]) for c in result["checks"] if not c["passed"]]


def test_a_real_syntax_error_beside_magics_is_still_reported():
    broken = "%matplotlib inline\n" + SOL.replace("def forward(self, x):", "def forward(self, x)")
    nb = submission("causal_head", {"head": broken})
    cell_no = 1 + next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "head")
    line = 1 + next(i for i, l in enumerate(broken.splitlines()) if "def forward(self, x)" in l)
    code = student_code(nb)
    assert code.problems == [f"syntax error in cell {cell_no} at line {line}: expected ':'"]
    assert "class Head" not in code.source


def test_read_notebook_gives_the_node_as_nbformat_reads_it(tmp_path):
    from attnkit.engine.judge import read_notebook
    nb = submission("causal_head", {"head": SOL})
    path = write(nb, tmp_path / "a.ipynb")
    assert read_notebook(path) == nbformat.read(str(path), as_version=4)
    (tmp_path / "b.ipynb").write_text('{"cells": [')
    with pytest.raises(UnreadableNotebook, match="not valid JSON"):
        read_notebook(tmp_path / "b.ipynb")


def test_a_reader_that_does_not_read_is_replaced_and_nobody_is_blamed(monkeypatch):
    nb = new_notebook(cells=[new_code_cell(f"S = {'x' * 300_000!r}\nclass Head:\n    pass\n")])  # > a pipe's buffer
    student_code(nb)
    stuck = untrusted._reader
    os.kill(stuck.pid, signal.SIGSTOP)
    monkeypatch.setattr(untrusted, "SECONDS", 1.0)
    try:
        assert "class Head:" in student_code(nb).source         # the forked route answered
        assert stuck.wait(5) == -signal.SIGKILL and untrusted._reader is None
    finally:
        if stuck.poll() is None:
            stuck.kill()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_notebook_that_is_not_a_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "nb.ipynb"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    started = time.monotonic()
    with pytest.raises(UnreadableNotebook, match="not a regular file"):
        untrusted.read_notebook(path)
    assert time.monotonic() - started < 10          # the reader's own limit is 30 s: no wait for a writer
