"""The first command on a user's machine: a bare clone of the branch, no data directory, the corpora's origins
stood in for by a local server (tests/origin_server.py). `make demo` fetches, verifies and grades every
assignment's sample class by the real nbgrader, with its feedback and its class report; a class graded while a
corpus is missing shows no traceback, only one line of the kit's log; without the origins `make demo` stops with
one sentence and a non-zero exit before grading anything.

A test of the demonstration course (tests/course/): `make demo` grades this checkout's assignments. The demo runs
once in the suite, here (it is the suite's longest test: issue 30). Its processes are the installed
`attnkit` and nbgrader run in the scratch course, with no PYTHONPATH, so none can import the test suite (`make
demo` once failed so: an assignment's corpus imported `tests`; tests/test_registry.py scans for such imports).

The clone reuses this checkout's virtual environment (VENV=..., with `make -o` so make does not rebuild it, which
would reinstall the kit from the clone): `attnkit` then runs the clone's code, as it does for any clone sharing a
venv (attnkit.cli.run_own_checkout)."""
import json
import os
import socket
import subprocess
from pathlib import Path

import nbformat

from tests import KIT_ROOT
from attnkit.course import BIN
from attnkit.engine import config, registry
from attnkit.engine.datasets import every_needed
from tests.origin_server import SHARED, Server, files, needs_source_sample

pytestmark = needs_source_sample     # the shared TinyStories source sample (tests/origin_server.py)
VENV = BIN.parent


def make_demo(clone: Path, mirror: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNKIT_DATA_DIR", "MAKEFLAGS", "MFLAGS")}
    env["ATTNKIT_DATA_MIRROR"] = mirror
    return subprocess.run(["make", "-o", str(VENV / ".installed"), "demo", f"VENV={VENV}"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=3600)     # a hang's guard, not a time limit


def outputs(clone: Path, student: str) -> tuple[str, list]:
    """The outputs of the student's graded attention_lm notebook (what the feedback page shows), as text, and its
    errors other than the judge's verdicts (a failed data cell: a traceback naming the sandbox's folders)."""
    nb = json.loads((clone / "demo_course" / "autograded" / student / "attention_lm" / "attention_lm.ipynb").read_text())
    shown = [o for c in nb["cells"] for o in c.get("outputs", [])]
    return json.dumps(shown), [o for o in shown if o["output_type"] == "error" and o["ename"] != "CheckFailed"]


def _pictures(clone: Path, a: str) -> int:
    """The pictures the committed solution notebook shows."""
    nb = nbformat.read(clone / "solutions" / a / f"{a}.ipynb", as_version=4)
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def assert_every_sample_class_graded(clone: Path, stdout: str) -> None:
    """Each assignment's table of automatic points from the nbgrader gradebook: the solution and the alternatives
    full marks, the release 0, a mistake less; each feedback page under 1 MB (a page a TA can mail or upload,
    issue 32), the solution's with every picture its notebook shows; each class report written."""
    course, lines = clone / "demo_course", stdout.splitlines()
    for a in registry.names():
        cfg = config.load(a)
        top = f"{sum(c.points for c in cfg.checks):g}"
        table = lines[lines.index(f"{a}: automatic points from the nbgrader gradebook") + 2:]
        rows = {line.split()[0]: line.split()[1:4] for line in table[:len(cfg.demo["students"])]}
        assert sorted(rows) == sorted(cfg.demo["students"]), (a, rows)
        for student, (_, which) in cfg.demo["students"].items():
            if which == "solution" or which.startswith("alternative:"):
                assert rows[student] == [top, "/", top], (a, student, rows[student])
            elif which == "release":
                assert rows[student] == ["0", "/", top], (a, student, rows[student])
            else:
                assert float(rows[student][0]) < float(top), (a, student, rows[student])
            page = (course / "feedback" / student / a / f"{a}.html").read_bytes()
            assert len(page) < 1_000_000, (a, student, len(page))
            if which == "solution":
                assert page.count(b"data:image/png;base64,") >= _pictures(clone, a), (a, student)
        assert (course / "reports" / f"{a}-class-report.html").is_file()


def test_a_bare_clone_fetches_grades_and_without_the_origins_stops_before_grading(tmp_path):
    clone = tmp_path / "attnkit"
    subprocess.run(["git", "clone", "-q", str(KIT_ROOT), str(clone)], check=True, capture_output=True, timeout=300)
    assert not list((clone / "data").glob("*.txt"))

    with Server(files(SHARED)) as server:
        p = make_demo(clone, f"{server.url}/redirect")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    for name in every_needed():
        assert f"{name}: downloaded from {server.url}/redirect/" in p.stdout, p.stdout[:2000]
        assert (clone / "data" / name).is_file()
    assert "demo finished in " in p.stdout and f"{clone}/demo_course/feedback/ada" in p.stdout
    assert_every_sample_class_graded(clone, p.stdout)
    shown, errors = outputs(clone, "ada")                    # a correct solution, run with its corpus
    assert errors == [] and "image/png" in shown, errors

    # A corpus missing when the class is graded: the kernel run is left out, and the kit says so once.
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ATTNKIT_DATA_DIR=str(empty), PYTHONPATH=str(clone))
    g = subprocess.run([str(BIN / "python"), "-c", "import sys, attnkit; sys.argv[0] = 'nbgrader'; "
                        "from nbgrader.apps.nbgraderapp import main; sys.exit(main())",
                        "autograde", "attention_lm", "--student", "ada", "--force"],
                       cwd=clone / "demo_course", env=env, capture_output=True, text=True, timeout=900)
    assert g.returncode == 0, g.stderr[-3000:]
    said = [line for line in g.stderr.splitlines() if "outputs are not shown" in line]
    assert len(said) == 1 and "stories.txt is not in" in said[0] and "attnkit data fetch" in said[0], g.stderr[-3000:]
    shown, errors = outputs(clone, "ada")
    assert errors == [] and "stories.txt" not in shown and "/tmp/work" not in shown, errors

    # Without the origins: one sentence, a non-zero exit, nothing graded.
    for name in every_needed():
        (clone / "data" / name).unlink()
    demo_course = clone / "demo_course"
    subprocess.run(["rm", "-rf", str(demo_course)], check=True)
    with socket.socket() as s:                          # bound, never listening: the host does not answer
        s.bind(("127.0.0.1", 0))
        p = make_demo(clone, f"http://127.0.0.1:{s.getsockname()[1]}")
    assert p.returncode != 0, p.stdout[-2000:]
    ours = [line for line in p.stderr.splitlines() if not line.startswith("make")]
    # one sentence per corpus, every missing one named in the one run
    assert len(ours) == len(every_needed()) and all(
        line.startswith("attnkit data fetch: ") and "could not be downloaded" in line for line in ours), p.stderr
    assert all("put a copy obtained another way" in line and str(clone / "data") in line for line in ours)
    assert "PrepareCourse" not in p.stdout and not demo_course.exists()
    assert sorted(p.name for p in (clone / "data").iterdir()) == ["SOURCES.md", "corpus.py"], \
        "a partial or temporary file was left beside the committed files"
