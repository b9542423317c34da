"""Benchmark: grading a whole class with `nbgrader autograde`, `attnkit autograde --jobs 1` and `attnkit autograde`.

Not a test: it prints figures. Usage: python bench/class_throughput.py [--n 100] [--jobs N] [--keep DIR] [--no-nbgrader] [--dask]

Builds a scratch course with both assignments and a synthetic class of N submissions (split across the
assignments, cycling through the kit's corpus: the solution, the unanswered release, every mistake and
every correct alternative), makes three identical copies of it and grades each copy with one path:

  nbgrader autograde A              sequential, the course's full pipeline (kernel run included)
  attnkit autograde A --jobs 1      one worker, no kernel run
  attnkit autograde A               one worker per core (or --jobs)
  attnkit autograde A --scheduler   (--dask) the judge on a Dask cluster of 1, then 2, local workers
                                    (`dask scheduler` and `dask worker` processes on 127.0.0.1, one thread
                                    each, started and warm before the command is timed: the course's cluster)

Each path is timed as whole commands (start-up included), one per assignment. Prints submissions per
minute, the ratios, the peak memory, and whether the three gradebooks agree on every grade cell of
every submission (exit status 1 if they do not).
"""
import argparse
import json
import os
import shutil
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
from attnkit.autograde import STATE_DIR  # noqa: E402
from attnkit.mutants import submissions as corpus_submissions  # noqa: E402
from attnkit.engine import registry  # noqa: E402

ASSIGNMENTS = tuple(registry.names())


def build_class(course: Path, n: int) -> dict[str, dict[str, str]]:
    """assignment -> student -> corpus variant; N submissions split across the assignments."""
    write_course_config(course)
    made = {}
    for i, a in enumerate(ASSIGNMENTS):
        shutil.copytree(ROOT / "source" / a, course / "source" / a, symlinks=False)
        nbgrader("generate_assignment", a, "--force", cwd=course)
        subs = corpus_submissions(a)
        variants = sorted(subs)
        count = n // len(ASSIGNMENTS) + (1 if i < n % len(ASSIGNMENTS) else 0)
        made[a] = {}
        for k in range(count):
            student, variant = f"s{k:03d}", variants[k % len(variants)]
            dest = course / "submitted" / student / a
            dest.mkdir(parents=True)
            nbformat.write(subs[variant], dest / f"{a}.ipynb")
            made[a][student] = variant
    return made


def run(cmd, cwd) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of the largest process in the command's tree that it waited for."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    with open(cwd / ".bench.log", "a") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=log)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}); see {cwd / '.bench.log'}")
    return seconds, usage.ru_maxrss / 1024


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(workers: int, folder: Path) -> tuple[str, list]:
    """A scheduler and ``workers`` one-thread workers on 127.0.0.1, ready; (address, processes)."""
    from attnkit.autograde import cluster
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "dask.log", "a")
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard", "--no-show"], env=env, stdout=log, stderr=log)]
    for i in range(workers):
        (folder / f"w{i}").mkdir(exist_ok=True)
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1",
                                       "--no-nanny", "--host", "127.0.0.1", "--no-dashboard",
                                       "--local-directory", str(folder / f"w{i}")], env=env, stdout=log, stderr=log))
    client = cluster.connect(address, timeout=120)
    client.wait_for_workers(workers, timeout=120)
    client.close()
    return address, procs


def stop_cluster(procs: list) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def gradebook(course: Path) -> dict:
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for a in ASSIGNMENTS:
            for sub in gb.assignment_submissions(a):
                for nb in sub.notebooks:
                    for g in nb.grades:
                        out[(a, sub.student.id, nb.name, g.name)] = (g.auto_score, g.needs_manual_grade)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100, help="submissions in the class, across both assignments")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="workers of the parallel run")
    ap.add_argument("--keep", help="build the scratch courses here and keep them (default: a temporary directory)")
    ap.add_argument("--no-nbgrader", action="store_true",
                    help="leave out the sequential nbgrader run (minutes for a class): only attnkit's two runs, "
                         "ratios against the first of them")
    ap.add_argument("--dask", action="store_true",
                    help="also grade with --scheduler on a local Dask cluster of 1 and of 2 workers")
    args = ap.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="attnkit-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        base = tmp / "base"
        if base.exists():
            shutil.rmtree(base)
        base.mkdir()
        made = build_class(base, args.n)
        counts = {a: len(s) for a, s in made.items()}
        print(f"class: {args.n} submissions ({', '.join(f'{a} {c}' for a, c in counts.items())}), "
              f"{os.cpu_count()} cores, parallel run with {args.jobs} workers", flush=True)
        paths = {
            "nbgrader autograde (sequential)": ("seq", lambda a: [str(BIN / "nbgrader"), "autograde", a]),
            "attnkit autograde --jobs 1": ("one", lambda a: [sys.executable, "-m", "attnkit", "autograde", a,
                                                            "--jobs", "1"]),
            f"attnkit autograde --jobs {args.jobs}": ("all", lambda a: [sys.executable, "-m", "attnkit", "autograde",
                                                                       a, "--jobs", str(args.jobs)]),
        }
        clusters = {}
        if args.dask:
            for k in (1, 2):
                clusters[k] = None
                paths[f"attnkit --scheduler, {k} Dask worker(s)"] = (
                    f"dask{k}", lambda a, k=k: [sys.executable, "-m", "attnkit", "autograde", a,
                                                "--scheduler", clusters[k][0]])
        if args.no_nbgrader:
            del paths["nbgrader autograde (sequential)"]
        figures, books = {}, {}
        for label, (name, cmd) in paths.items():
            course = tmp / name
            if course.exists():
                shutil.rmtree(course)
            shutil.copytree(base, course)
            per, peak = {}, 0.0
            k = int(name[4:]) if name.startswith("dask") else None
            if k:
                clusters[k] = start_cluster(k, tmp / f"cluster{k}")
            try:
                for a in ASSIGNMENTS:
                    per[a], rss = run(cmd(a), course)
                    peak = max(peak, rss)
            finally:
                if k:
                    stop_cluster(clusters[k][1])
            workers, phase = [], {}
            for a in ASSIGNMENTS:
                stats = course / STATE_DIR / a / "last_run.json"
                if stats.is_file():
                    last = json.loads(stats.read_text())
                    workers += last["workers"]
                    phase[a] = last["seconds"]
            import re
            split = re.findall(r"per student: ([0-9.]+) s judging on a worker, ([0-9.]+) s recording here",
                               (course / ".bench.log").read_text())            # the Dask path's closing line, per command
            figures[label] = {"per": per, "total": sum(per.values()), "peak": peak, "workers": workers,
                              "phase": phase, "split": dict(zip(ASSIGNMENTS, split)) if k else {}}
            books[label] = gradebook(course)
            print(f"  {label}: {sum(per.values()):.1f} s "
                  f"({', '.join(f'{a} {s:.1f} s' for a, s in per.items())})", flush=True)

        n = sum(counts.values())
        base_label = next(iter(figures))
        print()
        versus = "vs first" if args.no_nbgrader else "vs nbgrader"
        print(f"{'path':<36} {'seconds':>8} {'s/subm':>7} {'subm/min':>9} {versus:>12}  peak memory")
        for label, f in figures.items():
            if f["workers"] and "peak_rss_mib" in f["workers"][0] and not str(f["workers"][0]["pid"]).startswith("tcp"):
                mem = (f"{max(w['peak_rss_mib'] for w in f['workers']):.0f} MiB per worker, judge child "
                       f"{max(w['peak_judge_child_rss_mib'] for w in f['workers']):.0f} MiB")
            else:
                mem = f"{f['peak']:.0f} MiB (largest process)"
            print(f"{label:<36} {f['total']:>8.1f} {f['total'] / n:>7.2f} {n / f['total'] * 60:>9.1f} "
                  f"{figures[base_label]['total'] / f['total']:>11.1f}x  {mem}")
        print()
        for a in ASSIGNMENTS:
            print(f"  {a:<14} " + "   ".join(f"{label.split(' (')[0]}: {f['per'][a] / counts[a]:.2f} s/subm"
                                              for label, f in figures.items()))
        print()
        print("grading phase only (the command's start-up excluded: Python, torch and nbgrader imports, "
              "the fork server, about 2-3 s per command):")
        for label, f in figures.items():
            if f["phase"]:
                print(f"  {label:<36} " + "   ".join(
                    f"{a}: {f['phase'][a] / counts[a]:.3f} s/subm, fixed {f['per'][a] - f['phase'][a]:.1f} s "
                    f"({figures[base_label]['per'][a] / f['phase'][a]:.1f}x {base_label}'s whole command)"
                    for a in ASSIGNMENTS))
        for label, f in figures.items():
            if f["split"]:
                print(f"  {label:<36} per student: " + "   ".join(
                    f"{a}: judge {float(j):.3f} s on a worker, record {float(r):.3f} s here"
                    for a, (j, r) in f["split"].items()))
        labels = list(books)
        reference = books[labels[0]]
        diffs = [(k, label, reference.get(k), b.get(k)) for label in labels[1:] for b in [books[label]]
                 for k in sorted(set(reference) | set(b)) if reference.get(k) != b.get(k)]
        print()
        if diffs or not reference:
            print(f"SCORES DISAGREE: {len(diffs)} grade cells differ")
            for k, label, want, got in diffs[:20]:
                print(f"  {k}: nbgrader {want}, {label} {got}")
            return 1
        print(f"all {len(labels)} paths agree on every score: {len(reference)} grade cells of {n} submissions "
              f"(auto score and manual-grading flag of each cell)")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
