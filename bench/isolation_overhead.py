"""Benchmark: what the sandbox costs per submission.

Times the judge on the correct solution in a warm grader process, with the full sandbox (user, mount,
net and PID namespaces, the course hidden) and without namespaces (ATTNKIT_NO_NAMESPACES=1: the child
still runs with -I -S, resource limits and forked workers for the checks). Not a test: it prints figures.
Usage: python bench/isolation_overhead.py [--repeat 5] [--assignment A]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnkit.engine import registry  # noqa: E402
registry.use_course(ROOT)       # this checkout is the course it measures
from attnkit.engine import registry  # noqa: E402
PROBE = """
import json, sys, time
sys.path.insert(0, {root!r})
from attnkit.engine.judge import grade
from attnkit.isolation.sandbox import namespaces_available
from attnkit.mutants import submissions as corpus_submissions
nb = corpus_submissions({a!r})["solution"]
grade(nb, {a!r})                                   # warm-up: imports, caches
times = []
for _ in range({n}):
    t = time.perf_counter(); r = grade(nb, {a!r}); times.append(time.perf_counter() - t)
print(json.dumps({{"namespaces": namespaces_available(), "times": times, "score": r["score"]}}))
"""


def measure(assignment, repeat, sandbox: bool) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if not sandbox:
        env["ATTNKIT_NO_NAMESPACES"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT), a=assignment, n=repeat)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--assignment", default=registry.names()[-1], choices=registry.names())
    args = ap.parse_args()
    full, bare = measure(args.assignment, args.repeat, True), measure(args.assignment, args.repeat, False)
    assert full["score"] == bare["score"], "the sandbox must not change a score"
    for name, m in (("with namespaces", full), ("without namespaces", bare)):
        print(f"{args.assignment} {name:<20} (active: {m['namespaces']}): median "
              f"{statistics.median(m['times']):.3f} s per submission  runs "
              + ", ".join(f"{t:.3f}" for t in m["times"]))
    print(f"overhead of the namespaces: {statistics.median(full['times']) - statistics.median(bare['times']):+.3f} s "
          "per submission")


if __name__ == "__main__":
    main()
