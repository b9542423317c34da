"""Benchmark: the floor of grading one submission, and where a judged submission's time goes.

Not a test: it prints figures. Usage: python bench/floor.py [--repeat 20]

For each assignment, on the correct solution, one core:
  fresh interpreter    a new `python -I -S -c "import torch"` (what every child cost before the zygote)
  fork                 forking a process that has imported torch and matplotlib, child exits at once
  judge, warm          attnkit.engine.judge.grade with a warm zygote: the whole judged submission
    of which child     the submission's own process: fork from the zygote, namespaces, confinement,
                       loading the definitions, the experiments (each check's forward/backward)
    of which judge     building the plan, the checks, the diagnosis, in the grading process
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnkit.engine import registry  # noqa: E402
registry.use_course(ROOT)       # this checkout is the course it measures
os.environ.setdefault("OMP_NUM_THREADS", "1")
from attnkit.engine import judge, registry
from attnkit.isolation import sandbox  # noqa: E402
from attnkit.mutants import submissions  # noqa: E402


def median_ms(values) -> float:
    return statistics.median(values) * 1000


def fork_cost(repeat: int) -> float:
    import matplotlib  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        times.append(time.perf_counter() - t)
    return median_ms(times)


def fresh_interpreter(repeat: int) -> float:
    times = []
    for _ in range(max(3, repeat // 5)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c",
                        f"import sys; sys.path.extend({sandbox._site_dirs()!r}); import torch"], check=True)
        times.append(time.perf_counter() - t)
    return median_ms(times)


def judged(assignment: str, repeat: int) -> tuple[float, float]:
    nb = submissions(assignment)["solution"]
    child_seconds = []
    original = sandbox.run_child

    def spy(*a, **k):
        run = original(*a, **k)
        child_seconds.append(run.seconds)
        return run
    sandbox.run_child = spy
    try:
        judge.grade(nb, assignment)                     # starts the zygote
        child_seconds.clear()
        totals = []
        for _ in range(repeat):
            t = time.perf_counter()
            result = judge.grade(nb, assignment)
            totals.append(time.perf_counter() - t)
            assert result["score"] == result["max_score"], result
    finally:
        sandbox.run_child = original
    return median_ms(totals), median_ms(child_seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(f"fresh interpreter importing torch: {fresh_interpreter(args.repeat):7.1f} ms")
    print(f"fork of a process with torch:      {fork_cost(args.repeat):7.1f} ms")
    for a in registry.names():
        total, child = judged(a, args.repeat)
        print(f"{a}: judged submission {total:6.1f} ms = child {child:6.1f} ms + judge {total - child:5.1f} ms "
              f"(median of {args.repeat}, zygote {'on' if sandbox.zygote.enabled() else 'off'})")


if __name__ == "__main__":
    main()
