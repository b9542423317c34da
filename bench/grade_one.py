"""Benchmark: wall time to grade one submission with `attnkit grade` and with `nbgrader autograde`.

Not a test: it prints figures. Usage: python bench/grade_one.py [--repeat 3]
Both paths grade the same submission (the correct solution) in a scratch course.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnkit.engine import registry  # noqa: E402
registry.use_course(ROOT)       # this checkout is the course it measures
from attnkit.course import BIN, nbgrader, write_course_config  # noqa: E402
from attnkit.mutants import solution_source, submission  # noqa: E402
from attnkit.engine import registry  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--assignment", default=registry.names()[-1], choices=registry.names())
    args = ap.parse_args()
    a, cell_id = args.assignment, registry.get(args.assignment).mutants().SOLUTION_CELL
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        write_course_config(course)
        shutil.copytree(ROOT / "source" / a, course / "source" / a, symlinks=False)
        nbgrader("generate_assignment", a, "--force", cwd=course)
        nb = submission(a, {cell_id: solution_source(a, cell_id)})
        sub = course / "submitted" / "s1" / a
        sub.mkdir(parents=True)
        nbformat.write(nb, sub / f"{a}.ipynb")

        grade = [timed(lambda: subprocess.run([str(BIN / "attnkit"), "grade", str(sub / f"{a}.ipynb"),
                                              "--assignment", a, "--json"], check=True,
                                             capture_output=True)) for _ in range(args.repeat)]
        auto = [timed(lambda: nbgrader("autograde", a, "--force", cwd=course)) for _ in range(args.repeat)]
    print(f"attnkit grade (one submission, whole command): median {statistics.median(grade):.2f} s  "
          f"runs {', '.join(f'{t:.2f}' for t in grade)}")
    print(f"nbgrader autograde (same submission, whole command): median {statistics.median(auto):.2f} s  "
          f"runs {', '.join(f'{t:.2f}' for t in auto)}")
    print(f"ratio: {statistics.median(auto) / statistics.median(grade):.1f}x")


if __name__ == "__main__":
    main()
