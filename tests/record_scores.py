"""Record, once, every corpus submission's points per check, so a change of layout can prove it moved nothing.

    python -m tests.record_scores          # prints the recording (tests/recorded_scores.json is made from it)

The recording is made with the suite's grading key (tests/conftest.py) before a change that must keep the
scores, and tests/course/test_recorded_scores.py compares the suite's own gradings with it. Do not re-record to make
that test pass: a difference is the finding.
"""
import json
import sys
from pathlib import Path

RECORDING = Path(__file__).with_name("recorded_scores.json")


def scores(results: dict) -> dict:
    """name -> {"score": total, "checks": {check id: points}} for one assignment's gradings."""
    return {name: {"score": r["score"], "checks": {c["id"]: c["points"] for c in r["checks"]}}
            for name, r in sorted(results.items())}


def main() -> None:
    from tests.conftest import ASSIGNMENTS, _grade_all
    json.dump({a: scores(_grade_all(a)[0]) for a in ASSIGNMENTS}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
