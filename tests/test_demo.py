"""`make demo` as an instructor meets it: the installed `attnkit` command, run from outside the checkout (the
course it demonstrates named by --course-dir), where nothing of the test suite can be imported; every assignment's sample class graded by the real nbgrader, with
its feedback and its class report. (It failed so once, and no test saw it: an assignment's corpus imported
`tests`, which only a process started inside the checkout could find.)"""
import os
import subprocess

import nbformat

from attnkit.course import BIN
from tests import KIT_ROOT
from attnkit.engine import config, registry


def _pictures(a: str) -> int:
    """The pictures the committed solution notebook shows."""
    nb = nbformat.read(KIT_ROOT / "solutions" / a / f"{a}.ipynb", as_version=4)
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


# a guard against a hang, not a time limit: the former 900 s was reached under load on a 2-core machine (issue 30)
HANG = 3600


def test_the_demo_grades_every_sample_class_from_outside_the_checkout(tmp_path):
    course, elsewhere = tmp_path / "demo_course", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    p = subprocess.run([str(BIN / "attnkit"), "demo", "--course-dir", str(KIT_ROOT), "--into", str(course)], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=HANG)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
    lines = p.stdout.splitlines()
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
            assert len(page) < 1_000_000, (a, student, len(page))    # a page a TA can mail or upload (issue 32)
            if which == "solution":                                  # ... with every picture the notebook shows
                assert page.count(b"data:image/png;base64,") >= _pictures(a), (a, student)
        assert (course / "reports" / f"{a}-class-report.html").is_file()
    assert lines[-1].startswith("demo finished in ")
