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
from attnkit.course import BIN, nbgrader, write_course_config  # noqa: E402
from tests.notebooks import solution_source, submission  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        write_course_config(course)
        shutil.copytree(ROOT / "source" / "causal_head", course / "source" / "causal_head", symlinks=False)
        nbgrader("generate_assignment", "causal_head", "--force", cwd=course)
        nb = submission("causal_head", {"head": solution_source("causal_head", "head")})
        sub = course / "submitted" / "s1" / "causal_head"
        sub.mkdir(parents=True)
        nbformat.write(nb, sub / "causal_head.ipynb")

        grade = [timed(lambda: subprocess.run([str(BIN / "attnkit"), "grade", str(sub / "causal_head.ipynb"),
                                              "--assignment", "causal_head", "--json"], check=True,
                                             capture_output=True)) for _ in range(args.repeat)]
        auto = [timed(lambda: nbgrader("autograde", "causal_head", "--force", cwd=course)) for _ in range(args.repeat)]
    print(f"attnkit grade (one submission, whole command): median {statistics.median(grade):.2f} s  "
          f"runs {', '.join(f'{t:.2f}' for t in grade)}")
    print(f"nbgrader autograde (same submission, whole command): median {statistics.median(auto):.2f} s  "
          f"runs {', '.join(f'{t:.2f}' for t in auto)}")
    print(f"ratio: {statistics.median(auto) / statistics.median(grade):.1f}x")


if __name__ == "__main__":
    main()
