"""Measurement: does a verdict depend on the grading key (the inputs drawn), or only on the submission?

Not a test: it prints figures. The judge's inputs are seeded from the grading key
(attnkit/engine/secret.py, which reads ATTNKIT_GRADING_KEY on every call, so one process can switch keys).
The seed is HMAC(key, assignment): the key decides the inputs, the submission cannot.
This grades every corpus entry of each assignment under N random keys and prints, per entry, the checks
it lost under each key: a mistake must lose exactly its listed `fails` for every key, and the solution
and every alternative must keep full marks for every key. Entries that do are summarised in one line.

With --folder DIR it grades every notebook of DIR (*.ipynb, any submissions, not only the kit's corpus) as
the one ASSIGNMENT given: nothing is listed for them, so a notebook is reported when the checks it loses, or
its diagnosis, are not the same under every key.

Usage: python bench/key_dependence.py [--keys 20] [--key-seed S] [--jobs 2] [ASSIGNMENT ...]
       python bench/key_dependence.py --folder DIR ASSIGNMENT [--keys 10]
"""
import argparse
import os
import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnkit.engine import registry  # noqa: E402
from attnkit.engine.judge import grade  # noqa: E402
from attnkit.mutants import apply_edits, module, submissions  # noqa: E402
from tests.notebooks import solution_source, submission  # noqa: E402


def corpus_entries(assignment):
    """name -> (notebook, listed fails or None for a correct one): the corpus of `tests.corpus.submissions`
    (mistakes, variants, alternatives, solution; not the unanswered release) plus the LM's SPELLINGS."""
    c = module(assignment)
    subs = {n: nb for n, nb in submissions(assignment).items() if n != "release"}
    sol = solution_source(assignment, c.SOLUTION_CELL)
    for n, m in getattr(c, "SPELLINGS", {}).items():
        subs[f"spelling:{n}"] = submission(assignment, {c.SOLUTION_CELL: apply_edits(sol, n, m)})
    table = {"mistake": c.MUTANTS, "variant": getattr(c, "VARIANTS", {}), "spelling": getattr(c, "SPELLINGS", {})}
    listed = {}
    for n in subs:
        kind, _, what = n.partition(":")
        listed[n] = frozenset(table[kind][what].fails) if kind in table else None
    return subs, listed


def folder_entries(folder: Path):
    """name -> (notebook, None): every notebook of ``folder``, read as the judge reads one; nothing listed."""
    from attnkit.engine.judge import read_notebook
    paths = sorted(Path(folder).glob("*.ipynb"))
    if not paths:
        raise SystemExit(f"no notebooks (*.ipynb) in {folder}")
    return {p.name: read_notebook(p) for p in paths}, {p.name: None for p in paths}


def lost(result) -> frozenset:
    return frozenset(c["id"] for c in result["checks"] if not c["passed"])


def verdict(result) -> tuple:
    """What must not depend on the key: the checks lost and the diagnosis named."""
    return lost(result), tuple(result.get("diagnosis_matches") or ())


def measure(assignment, keys, jobs, folder=None):
    subs, listed = folder_entries(folder) if folder else corpus_entries(assignment)
    per_key = {n: [] for n in subs}
    start = time.perf_counter()
    for key in keys:
        os.environ["ATTNKIT_GRADING_KEY"] = key        # read per grade by secret.seed_for
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            results = dict(zip(subs, ex.map(lambda nb: grade(nb, assignment), subs.values())))
        for n, r in results.items():
            per_key[n].append(verdict(r) if folder else lost(r))
    return per_key, listed, time.perf_counter() - start


def report_folder(assignment, keys, per_key, seconds):
    """Each notebook's verdicts across keys: the same under every key, or how they vary."""
    varies = []
    for n, sets in per_key.items():
        if len(set(sets)) > 1:
            varies.append(n)
            print(f"  VARIES {n}:")
            for (checks, named), count in Counter(sets).most_common():
                print(f"      {count:3d}/{len(keys)} keys: loses {sorted(checks) or 'nothing'}, named {list(named) or 'nothing'}")
    print(f"{assignment}: {len(per_key)} notebooks x {len(keys)} keys in {seconds:.0f} s: "
          f"{len(per_key) - len(varies)} the same under every key, {len(varies)} not ({', '.join(varies) or 'none'})")
    return len(varies)


def report(assignment, keys, per_key, listed, seconds):
    bad = []
    for n, sets in per_key.items():
        want = listed[n] if listed[n] is not None else frozenset()
        wrong = [i for i, s in enumerate(sets) if s != want]
        if wrong:
            bad.append(n)
            kind = "VARIES" if len(set(sets)) > 1 else "DIFFERS"
            print(f"  {kind} {n}: listed {sorted(want) or 'full marks'}")
            for s, count in Counter(sets).most_common():
                extra, missing = sorted(s - want), sorted(want - s)
                keys_of = [keys[i][:8] for i, t in enumerate(sets) if t == s][:4]
                print(f"      {count:3d}/{len(keys)} keys: {'as listed' if s == want else ''}"
                      f"{' +' + ','.join(extra) if extra else ''}{' -' + ','.join(missing) if missing else ''}"
                      f"{'  e.g. keys ' + ' '.join(keys_of) if s != want else ''}")
    correct = [n for n in per_key if listed[n] is None]
    print(f"{assignment}: {len(per_key)} entries ({len(per_key) - len(correct)} buggy, {len(correct)} correct) "
          f"x {len(keys)} keys in {seconds:.0f} s: {len(per_key) - len(bad)} exact under every key, "
          f"{len(bad)} not ({', '.join(bad) or 'none'})")
    return len(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("assignments", nargs="*", default=registry.names(), help="default: every assignment")
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--key-seed", type=int, default=None, help="draw the keys from this seed (to repeat a run)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--folder", type=Path, help="grade the notebooks of this folder (one ASSIGNMENT) instead of the corpus")
    args = ap.parse_args()
    if args.folder and len(args.assignments) != 1:
        ap.error("--folder grades the notebooks of one assignment: name it")
    seed = args.key_seed if args.key_seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    keys = [rng.randbytes(32).hex() for _ in range(args.keys)]
    print(f"{args.keys} keys drawn from --key-seed {seed}")
    bad = 0
    for a in args.assignments:
        per_key, listed, seconds = measure(a, keys, args.jobs, args.folder)
        bad += report_folder(a, keys, per_key, seconds) if args.folder else report(a, keys, per_key, listed, seconds)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
