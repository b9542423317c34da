"""Benchmark: an assignment's completed notebook, quiet and while other processes keep every core busy.

Not a test: it prints figures. Usage: python bench/notebook_under_load.py ASSIGNMENT [--threads N ...] [--repeat 1]
(docs/performance.md's figures are for the language model's notebook, whose training cell is the longest)

The notebook runs as a student's Jupyter runs it: a python3 kernel started by jupyter_client in the
notebook's folder (stories.txt beside it), with no OMP_NUM_THREADS, MKL_NUM_THREADS or MPLBACKEND in its
environment (the kit's own release sets them; a student's server does not). "Loaded" means one
``python -c "while True: pass"`` per core for the whole run (a browser and a video call, roughly), ended after.
For each setting it prints the whole notebook's wall time and the training cell's (the one that calls
train_model), quiet and loaded, and the ratio. ``--threads N`` adds a cell after the setup cell that calls
torch.set_num_threads(N), overriding whatever wordlm chose: compare ``--threads 2`` with ``--threads 1``; without
it the notebook runs as released.
"""
from __future__ import annotations

import argparse
import datetime as dt
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
from attnkit.engine import datasets  # noqa: E402

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MPLBACKEND")


def _folder(tmp: Path, A: str) -> Path:
    """The completed notebook with its helpers and corpus, as a student's folder holds them."""
    src = ROOT / "source" / A
    dest = tmp / A
    dest.mkdir()
    for path in src.iterdir():                         # the notebook and its released helpers, not the script
        if path.is_file() and not path.name.endswith(".pct.py"):
            shutil.copyfile(path, dest / path.name)
    for name, sha in datasets.needed(A).items():
        shutil.copyfile(datasets.verified(name, sha, datasets.data_dir()), dest / name)
    return dest


def _notebook(folder: Path, threads: int | None):
    nb = nbformat.read(folder / f"{folder.name}.ipynb", as_version=4)
    if threads is not None:
        setup = next(i for i, c in enumerate(nb.cells) if c.get("id") == "setup")
        nb.cells.insert(setup + 1, nbformat.v4.new_code_cell(f"torch.set_num_threads({threads})"))
    return nb


def _seconds(cell) -> float:
    t = cell.metadata["execution"]
    parse = dt.datetime.fromisoformat
    return (parse(t["shell.execute_reply"].rstrip("Z")) - parse(t["iopub.execute_input"].rstrip("Z"))).total_seconds()


def run_once(folder: Path, threads: int | None) -> tuple[float, float, int]:
    """(whole notebook s, training cell s, torch threads in the kernel)."""
    from nbclient import NotebookClient
    nb = _notebook(folder, threads)
    nb.cells.append(nbformat.v4.new_code_cell("print('THREADS', torch.get_num_threads())"))
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    client = NotebookClient(nb, timeout=1800, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(folder)}})
    t = time.perf_counter()
    client.execute(env=env)
    whole = time.perf_counter() - t
    train = next(c for c in nb.cells if c.cell_type == "code" and "train_model(model" in c.source)
    used = int(next(o["text"] for o in nb.cells[-1].outputs if o.get("name") == "stdout").split()[1])
    return whole, _seconds(train), used


class Load:
    """One busy process per core, for the time of the ``with``; each ended by its own pid after."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(1)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("assignment", help="whose completed notebook (source/ASSIGNMENT) to run")
    ap.add_argument("--threads", type=int, nargs="*", default=[None],
                    help="torch.set_num_threads(N) after the setup cell, one run per N (default: as released)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--busy", type=int, default=len(os.sched_getaffinity(0)), help="busy processes (default: one per core)")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"{dt.date.today()}  {cores} cores  torch threads default as the kernel chooses  load average before: "
          f"{os.getloadavg()[0]:.1f}  busy processes when loaded: {args.busy}")
    with tempfile.TemporaryDirectory(prefix="attnkit-bench-") as tmp:
        folder = _folder(Path(tmp), args.assignment)
        for threads in args.threads:
            label = "as released" if threads is None else f"set_num_threads({threads})"
            for _ in range(args.repeat):
                quiet = run_once(folder, threads)
                with Load(args.busy):
                    loaded = run_once(folder, threads)
                print(f"{label:<20} torch threads {quiet[2]}: notebook {quiet[0]:6.1f} s quiet, {loaded[0]:6.1f} s loaded "
                      f"({loaded[0] / quiet[0]:.1f}x); training cell {quiet[1]:5.1f} s quiet, {loaded[1]:6.1f} s loaded "
                      f"({loaded[1] / quiet[1]:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
