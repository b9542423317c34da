"""Measurement: does a verdict depend on the grading key (the inputs drawn), or only on the submission?

Not a test: it prints figures. The logic is the kit's (attnkit/key_dependence.py, which `attnkit check` runs over
a few keys); this grades every corpus entry of each assignment under N random keys and prints, per entry, the
checks it lost under each key when they are not exactly its listed `fails` (the solution and every alternative:
full marks). Entries that are exact are summarised in one line.

With --folder DIR it grades every notebook of DIR (*.ipynb, any submissions, not only the kit's corpus) as
the one ASSIGNMENT given: nothing is listed for them, so a notebook is reported when the checks it loses, or
its diagnosis, are not the same under every key.

Usage: python bench/key_dependence.py [--keys 20] [--key-seed S] [--jobs 2] [ASSIGNMENT ...]
       python bench/key_dependence.py --folder DIR ASSIGNMENT [--keys 10]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from attnkit import key_dependence as kd  # noqa: E402
from attnkit.engine import registry  # noqa: E402


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
    seed = args.key_seed if args.key_seed is not None else kd.fresh_key_seed()
    keys = kd.draw_keys(args.keys, seed)
    print(f"{args.keys} keys drawn from --key-seed {seed}")
    bad = 0
    for a in args.assignments:
        try:
            subs, listed = kd.folder_entries(args.folder) if args.folder else kd.corpus_entries(a)
        except ValueError as e:
            raise SystemExit(str(e))
        start = time.perf_counter()
        per_key = kd.grade_under_keys(a, subs, keys, args.jobs)
        seconds = time.perf_counter() - start
        found = kd.varying(per_key, keys) if args.folder else kd.inexact(per_key, listed, keys)
        for n, how in found.items():
            if args.folder:
                print(f"  VARIES {n}:" + "".join(f"\n      {line}" for line in how))
            else:                           # how[0]: "VARIES with the key: listed ..." or "DIFFERS from ..."
                print(f"  {how[0].split()[0]} {n}: {how[0].split(': ', 1)[1]}" + "".join(f"\n      {line}" for line in how[1:]))
        what = "notebooks" if args.folder else \
            f"entries ({sum(v is not None for v in listed.values())} buggy, {sum(v is None for v in listed.values())} correct)"
        good = "the same under every key" if args.folder else "exact under every key"
        print(f"{a}: {len(per_key)} {what} x {len(keys)} keys in {seconds:.0f} s: {len(per_key) - len(found)} "
              f"{good}, {len(found)} not ({', '.join(found) or 'none'})")
        bad += len(found)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
