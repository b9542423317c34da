"""Grade a folder of submissions written apart from the kit, and print how the judge did on them.

    python bench/blind_corpus.py [--folder tests/blind] [--json OUT]

The folder holds, per assignment, notebooks and ``truth.toml`` (written by whoever wrote the notebooks: each
entry's ``kind``, "correct" or "mistake", and in plain words ``what`` the mistake is) and ``names.toml`` (written
apart from the notebooks, from ``what``: the catalogue ids that would name that mistake rightly; none when no
entry of the catalogue is that mistake). Per assignment it prints: correct alternatives kept at full marks;
mistakes caught (lost points); and of those, named right, named wrong (a catalogue entry that is not the
mistake), unnamed ("no known pattern").
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnkit.engine import registry  # noqa: E402
registry.use_course(ROOT)       # this checkout is the course it measures


def verdicts(folder: Path, only: str | None = None) -> dict:
    """{assignment: {entry: {kind, score, max, named: [ids], right: [ids], lost: [ids], diagnosis: [ids]}}} for
    every notebook in ``folder`` (of assignment ``only``, when given), graded under the process's grading key."""
    from attnkit.engine import judge
    out = {}
    for sub in sorted(p for p in folder.iterdir() if (p / "truth.toml").exists() and only in (None, p.name)):
        truth = tomllib.loads((sub / "truth.toml").read_text())
        names = tomllib.loads((sub / "names.toml").read_text()) if (sub / "names.toml").exists() else {}
        for entry, t in sorted(truth.items()):
            r = judge.grade(sub / f"{entry}.ipynb", sub.name)
            named = sorted({c.get("diagnosis_id") for c in r["checks"] if c.get("diagnosis_id")})
            out.setdefault(sub.name, {})[entry] = {
                "kind": t["kind"], "score": r["score"], "max": r["max_score"], "named": named,
                "right": names.get(entry, {}).get("right", []),
                "lost": sorted(c["id"] for c in r["checks"] if not c["passed"]),
                "diagnosis": list(r.get("diagnosis_matches") or ())}     # tests/course/test_blind_keys.py compares it
    return out


def raised_only(v: dict) -> bool:
    """Whether the diagnosis is the one error the submission raised (``raised_<Type>``), not on names.toml's list:
    the error, where and that line are what was measured, so it names no cause that could be wrong; counted apart."""
    from attnkit.engine.diagnosis import RAISED
    return all(n.startswith(RAISED) and n not in v["right"] for n in v["named"])


def named_wrong(v: dict) -> bool:
    """A mistake given a cause that names.toml does not list as naming it (the raised error alone is no cause)."""
    return v["kind"] == "mistake" and bool(v["named"]) and not raised_only(v) and not set(v["named"]) <= set(v["right"])


def figures(graded: dict) -> dict:
    table = {}
    for a, entries in graded.items():
        f = dict.fromkeys(["correct", "full_marks", "mistakes", "caught", "named_right", "named_wrong", "error_said",
                           "unnamed"], 0)
        for v in entries.values():
            if v["kind"] == "correct":
                f["correct"] += 1
                f["full_marks"] += v["score"] == v["max"]
                continue
            f["mistakes"] += 1
            if v["score"] < v["max"]:
                f["caught"] += 1
            if not v["named"]:
                f["unnamed"] += v["score"] < v["max"]
            elif named_wrong(v):
                f["named_wrong"] += 1
            elif raised_only(v):
                f["error_said"] += 1
            else:
                f["named_right"] += 1
        table[a] = f
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", default=str(ROOT / "tests" / "blind"))
    ap.add_argument("--json", help="also write every verdict here")
    args = ap.parse_args(argv)
    graded = verdicts(Path(args.folder))
    if args.json:
        Path(args.json).write_text(json.dumps(graded, indent=1))
    print(f"{'assignment':14} {'correct kept':>12} {'caught':>8} {'named right':>11} {'named wrong':>11} "
          f"{'error said':>10} {'unnamed':>8}")
    for a, f in figures(graded).items():
        print(f"{a:14} {f['full_marks']:>5} / {f['correct']:<4} {f['caught']:>3} / {f['mistakes']:<3} "
              f"{f['named_right']:>11} {f['named_wrong']:>11} {f['error_said']:>10} {f['unnamed']:>8}")
    for a, entries in graded.items():
        for e, v in entries.items():
            if named_wrong(v) or (v["kind"] == "correct" and v["score"] < v["max"]) or (v["kind"] == "mistake"
                                                                               and v["score"] == v["max"]):
                print(f"  {a}/{e}: {v['score']:g}/{v['max']:g} lost {v['lost']} named {v['named']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
