"""`attnkit check A`: every invariant of one assignment the kit relies on, in one command a course author runs.

Each invariant is printed as `ok` or `FAIL` with the cause in plain words, in this order (cheap first):

  plug-in        ASSIGNMENT loads and covers the manifest's checks; drive.py defines run_experiment with the
                 five arguments the child passes; mutants.py has the names the kit reads (toolkit/corpus.py),
                 listing only checks the manifest has; each catalogue entry is this assignment's
  mistake ids    each id once in the catalogue; every mistake of the corpus is named by an id it has
  checks lost    every check lost by some mistake, and by one that loses it alone
  no leak        no line of the solution or hidden tests in any released file (attnkit/release_leaks.py)
  fresh release  the source notebook is its percent script's twin, and nbgrader's release of it, made now in a
                 scratch course, is byte for byte the committed release/A
  corpus         every corpus entry loses exactly its listed checks under each of N grading keys drawn at
                 random (the solution and alternatives: none), each mistake with its named diagnosis
                 (attnkit/key_dependence.py; the selfcheck's rule, under N keys instead of the course's one)

Exit 1 when any invariant fails. `--keys 0` leaves the corpus out (and says so). `attnkit selfcheck` stays the
quick one: the corpus under the course's key.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path


def _fresh_release_problems(a: str) -> list[str]:
    """The committed source twin and release/A against ones made now from the percent script."""
    import nbformat
    from attnkit.engine import config, datasets, registry
    from attnkit.release import generate_release, source_notebook
    root = registry.course()
    problems = []
    twin = registry.get(a).source / f"{a}.ipynb"
    fresh_twin = json.loads(nbformat.writes(source_notebook(twin.with_suffix(".pct.py"), config.load(a).points_by_cell())))
    if not twin.is_file() or json.loads(twin.read_text()) != fresh_twin:
        problems.append(f"source/{a}/{a}.ipynb is stale against {a}.pct.py: run `attnkit release {a}`")
    committed = root / "release" / a
    if not committed.is_dir():
        return problems + [f"release/{a}/ does not exist: run `attnkit release {a}`"]
    data = set(datasets.needed(a, root))         # staged beside the notebook, gitignored: not part of the release
    with tempfile.TemporaryDirectory(prefix="attnkit-check-") as tmp:
        fresh = generate_release(a, dest=Path(tmp) / a)
        made = {p.name for p in fresh.iterdir()}
        kept = {p.name for p in committed.iterdir()} - data
        for name in sorted(made - kept):
            problems.append(f"release/{a}/{name} is missing: a fresh release makes it (run `attnkit release {a}`)")
        for name in sorted(kept - made):
            problems.append(f"release/{a}/{name} is not made by a fresh release (left over from an older one?)")
        for name in sorted(made & kept):
            if (fresh / name).read_bytes() != (committed / name).read_bytes():
                problems.append(f"release/{a}/{name} differs from a fresh release of source/{a}: run "
                                f"`attnkit release {a}` (if it still differs afterwards, the release itself is not "
                                "reproducible: that is the kit's fault, not the assignment's)")
    return problems


def _leak_problems(a: str) -> list[str]:
    from attnkit.engine import datasets, registry
    from attnkit.release_leaks import leaks, secret_lines
    release = registry.course() / "release" / a
    secret = secret_lines(registry.get(a).source / f"{a}.pct.py")
    if not secret:
        return [f"source/{a}/{a}.pct.py has no ### BEGIN SOLUTION region with a line of 13 characters or more: "
                "nothing to look for"]
    if not release.is_dir():
        return [f"release/{a}/ does not exist: run `attnkit release {a}`"]
    found = leaks(release, secret, skip=set(datasets.needed(a)))
    return [f"release/{a}/{name} shows a line of the solution or hidden tests: {shown[0]!r}"
            + (f" (and {len(shown) - 1} more)" if len(shown) > 1 else "") for name, shown in found.items()]


def _corpus_problems(a: str, keys: list[str], jobs: int) -> list[str]:
    from attnkit import key_dependence as kd
    from attnkit.mutants import module
    from attnkit.selfcheck import verdicts
    subs, listed = kd.corpus_entries(a)
    per_key = kd.grade_under_keys(a, subs, keys, jobs)
    problems = [f"{name} {how[0]}; " + "; ".join(line.strip() for line in how[1:])
                for name, how in kd.inexact(per_key, listed, keys).items()]
    named = set()
    for i in range(len(keys)):
        _, undiagnosed, _ = verdicts(module(a), {n: rs[i] for n, rs in per_key.items()})
        named |= {f"{u} under key {keys[i][:8]}" for u in undiagnosed}
    return problems + [f"wrong or missing diagnosis: {u}" for u in sorted(named)]


def check_assignment(a: str, keys: list[str], jobs: int, log=print) -> int:
    """Every invariant of ``a``, printed; returns how many failed."""
    from attnkit import plugin_shape
    steps = [("plug-in", lambda: plugin_shape.plugin_problems(a) + plugin_shape.corpus_problems(a)),
             ("mistake ids", lambda: plugin_shape.id_problems(a)),
             ("checks lost", lambda: plugin_shape.isolation_problems(a)),
             ("no leak", lambda: _leak_problems(a)),
             ("fresh release", lambda: _fresh_release_problems(a)),
             (f"corpus x {len(keys)} keys", lambda: _corpus_problems(a, keys, jobs))][:6 if keys else 5]
    failed = 0
    for i, (what, run) in enumerate(steps):
        start = time.perf_counter()
        try:
            problems = run()
        except Exception as e:  # noqa: BLE001 - the course's code raised: that is the finding
            problems = [f"stopped: {type(e).__name__}: {e}"]
        took = f"({time.perf_counter() - start:.0f} s)"
        if not problems:
            log(f"  ok    {what} {took}")
            continue
        failed += 1
        log(f"  FAIL  {what}: {problems[0]}")
        for p in problems[1:]:
            log(f"        {what}: {p}")
        if i == 0:          # nothing else can be read from a plug-in that does not load or fit
            log("  (the rest not checked: the plug-in must be right first)")
            return failed
    if not keys:
        log("  skip  corpus (--keys 0)")
    return failed


def run_check(assignments, keys: int = 3, key_seed: int | None = None, jobs: int | None = None, log=print) -> int:
    import os
    from attnkit import key_dependence as kd
    seed = kd.fresh_key_seed() if key_seed is None else key_seed
    drawn = kd.draw_keys(keys, seed)
    if keys:
        log(f"the corpus under {keys} grading keys drawn from --key-seed {seed}")
    bad = 0
    for a in assignments:
        log(f"{a}:")
        failed = check_assignment(a, drawn, jobs or os.cpu_count() or 2, log)
        holds = "every invariant holds" if keys else "every invariant but the corpus's holds"
        log(f"{a}: {holds if not failed else f'{failed} invariant(s) FAILED'}")
        bad += failed
    return 1 if bad else 0
