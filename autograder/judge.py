"""Grade one submission notebook: extract, run in a child, judge, report.

The one entry point both grading paths share (``attnkit grade`` and the
nbgrader preprocessor), so the two can never disagree on a score.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import nbformat

from . import config, sandbox
from .notebook_code import extract
from .results import CheckFailed, Results


def _assignment_module(assignment: str):
    return importlib.import_module(f"autograder.{assignment}")


def _tensors_for_child(plan) -> dict:
    return {k: v.numpy() for k, v in plan["tensors"].items()}


def run_submission(nb, assignment: str):
    """Run the judge's experiments on notebook ``nb`` (path or nbformat node) in a child process."""
    if isinstance(nb, (str, Path)):
        nb = nbformat.read(str(nb), as_version=4)
    cfg, mod = config.load(assignment), _assignment_module(assignment)
    code, plan = extract(nb), mod.make_plan()
    run = sandbox.run_child(sandbox.child_program(mod.DRIVER),
                            {"source": code.source, "experiments": plan["experiments"], "modules": plan.get("modules", {})},
                            _tensors_for_child(plan), cfg.limits)
    return Results(run, code, cfg.limits), plan, cfg, mod


def grade(nb, assignment: str) -> dict:
    """Judge notebook ``nb`` (path or nbformat node). Returns the result dict of ``attnkit grade --json``."""
    results, plan, cfg, mod = run_submission(nb, assignment)
    checks = []
    for check in cfg.checks:
        fn = getattr(mod.checks, f"test_{check.id}")
        try:
            fn(results, plan)
            passed, message = True, "passed"
        except CheckFailed as e:
            passed, message = False, str(e)
        checks.append({"id": check.id, "title": check.title, "passed": passed,
                       "points": check.points if passed else 0.0, "max_points": check.points,
                       "message": message, "diagnosis": None})
    return {"assignment": assignment,
            "score": sum(c["points"] for c in checks), "max_score": cfg.max_score,
            "error": results.fatal(), "checks": checks}


def main(argv=None) -> int:  # python -m autograder.judge NB ASSIGNMENT
    import sys
    nb, assignment = (argv or sys.argv[1:])[:2]
    print(json.dumps(grade(nb, assignment), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
