"""What a run leaves behind: the per-check CSV, last_run.json and the summary table it prints.

All three are built from the gradebook and the markers as they are at the end of the run, so an
interrupted run still writes them for what finished.
"""
from __future__ import annotations

import json
from pathlib import Path

from attnkit.atomic import write_atomic
from attnkit.safe_csv import to_csv
from attnkit.table import Row, class_table, failed_note

CSV_HEADER = ["assignment", "student", "notebook", "check", "grade_cell", "title", "points", "max_points",
              "passed", "message", "diagnosis"]


def write_checks_csv(path: Path, assignment: str, checks: list, markers: dict[str, dict | None],
                     grades: dict) -> int:
    """``autograded/<assignment>-checks.csv``: one row per student per check, the gradebook's points and
    the judge's words. ``markers``: student -> their marker (None when not graded), in the order of the
    rows. Returns the number of rows."""
    cells = {c[0]: (c[1], c[2]) for c in checks}
    rows = [CSV_HEADER]
    for student, marker in markers.items():
        if marker is None or student not in grades:
            continue
        for nb_name, result in sorted((marker.get("results") or {}).items()):
            for check in result.get("checks", []):
                cell, title = cells.get(check["id"], (None, check.get("title")))
                g = grades[student].get((nb_name, cell))
                points = g["auto_score"] if g is not None and g["auto_score"] is not None else check["points"]
                rows.append([assignment, student, nb_name, check["id"], cell or "", title,
                             f"{float(points):g}", f"{float(check['max_points']):g}",
                             "yes" if check["passed"] else "no",
                             "" if check["passed"] else check.get("message") or "",
                             check.get("diagnosis") or ""])
    write_atomic(path, to_csv(rows))     # formula-safe: a student's exception text may start with "="
    return len(rows) - 1


def write_run_json(path: Path, *, assignment: str, jobs: int, execute: bool, todo: list[str], outcomes: dict,
                   skipped: list[str], seconds: float, interrupted: bool, workers: list) -> None:
    """``last_run.json``: what this run graded, failed and skipped, and each worker's peak memory.
    ``workers``: (pid, the outcomes it returned) per worker process."""
    def peak(results, key):
        return max([r.get(key, 0) for r in results] + [0])
    info = {"assignment": assignment, "jobs": jobs, "execute": execute,
            "to_grade": len(todo), "graded": sorted(s for s, o in outcomes.items() if o["ok"]),
            "failed": {s: o["error"] for s, o in outcomes.items() if not o["ok"]},
            "skipped": skipped, "seconds": seconds, "interrupted": interrupted,
            "workers": [{"pid": pid, "graded": len(results), "peak_rss_mib": round(peak(results, "rss_kib") / 1024, 1),
                         "peak_judge_child_rss_mib": round(peak(results, "child_rss_kib") / 1024, 1)}
                        for pid, results in workers]}
    write_atomic(path, json.dumps(info, indent=1))


def summary(*, selection: list[str], outcomes: dict, skipped: list[str], grades: dict, checks: list,
            jobs: int, todo: list[str], interrupted: bool, seconds: float, gradebook: str, csv_path: Path,
            csv_rows: int) -> str:
    """The table printed at the end: each selected student's score, status and lost checks, then totals."""
    cells = {c[1]: c[0] for c in checks}
    order = {c[1]: i for i, c in enumerate(checks)}
    rows = []
    for s in selection:
        o = outcomes.get(s)
        status = ("graded" if o and o["ok"] else "FAILED" if o else
                  "already graded" if s in skipped else "not graded")
        g = grades.get(s, {})
        auto = [v for v in g.values() if v["cell_type"] == "code"]
        if auto and status != "FAILED" and status != "not graded":
            lost = [cells.get(k[1], k[1]) for k, v in sorted(g.items(), key=lambda kv: (order.get(kv[0][1], 1e9), kv[0]))
                    if v["cell_type"] == "code" and (v["auto_score"] or 0) < v["max_score"]]
            written = [(v["manual_score"], v["max_score"]) for v in g.values() if v["cell_type"] == "markdown"]
            rows.append(Row(s, sum(v["auto_score"] or 0 for v in auto), sum(v["max_score"] for v in auto),
                            failed_note(lost, written), status))
        else:
            rows.append(Row(s, None, None, ((o or {}).get("error") or "")[:200], status))
    lines = class_table(rows).split("\n")
    graded = sum(1 for o in outcomes.values() if o["ok"])
    failed = sum(1 for o in outcomes.values() if not o["ok"])
    rate = f", {graded / seconds * 60:.1f} submissions/min" if graded and seconds > 0 else ""
    lines.append("")
    lines.append(f"{graded} graded, {len(skipped)} already graded, {failed} failed"
                 + (f", {len(todo) - len(outcomes)} not reached (interrupted)" if interrupted else "")
                 + f" in {seconds:.1f} s with {min(jobs, len(todo))} worker(s){rate}")
    lines.append(f"gradebook: {gradebook}")
    lines.append(f"per-check CSV: {csv_path} ({csv_rows} rows)")
    return "\n".join(lines)
