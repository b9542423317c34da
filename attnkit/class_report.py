"""`attnkit report ASSIGNMENT`: one offline HTML page for the TAs of a graded class.

Reads what grading recorded: automatic points per test cell from the nbgrader gradebook, and the
judge's result (messages, diagnoses, errors) that JudgeGradeCells stored in each autograded notebook.
Shows the score histogram, the pass rate of every check, how often each named mistake occurred and
who hit it, a sortable table of students linking their feedback, and the submissions that errored.
"""
from __future__ import annotations

import html
from collections import Counter, defaultdict
from pathlib import Path

import nbformat

from autograder import config
from .course import gradebook_scores
from .feedback_report import SELF_CHECK, STYLE

SORT_SCRIPT = """<script>
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.style.cursor = 'pointer';
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var asc = th.dataset.asc !== 'true'; th.dataset.asc = String(asc);
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.sort || a.cells[col].textContent, y = b.cells[col].dataset.sort || b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c; });
    rows.forEach(function (r) { body.appendChild(r); }); }); });
</script>"""


def collect(course: Path, assignment: str) -> list[dict]:
    """Per student: automatic score, failed checks, diagnoses and error, from the gradebook and autograded/."""
    cfg = config.load(assignment)
    cells = cfg.by_cell()
    rows = []
    for student, g in sorted(gradebook_scores(course, assignment).items()):
        row = {"student": student, "score": g["auto"], "max": cfg.max_score, "diagnoses": {}, "error": None,
               "failed": [cells[name].id for name in g["lost"] if name in cells],
               "feedback": f"../feedback/{student}/{assignment}/{cfg.notebook}.html"}
        autograded = course / "autograded" / student / assignment / f"{cfg.notebook}.ipynb"
        if autograded.is_file():
            result = nbformat.read(str(autograded), as_version=4).metadata.get("attnkit") or {}
            row["error"] = result.get("error")
            row["diagnoses"] = {c["id"]: c.get("diagnosis_id") for c in result.get("checks", [])
                                if not c["passed"] and c.get("diagnosis_id")}
        rows.append(row)
    return rows


def _png(fig) -> str:
    import base64
    import io
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _charts(rows, cfg) -> tuple[str, str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist([r["score"] for r in rows], bins=range(0, int(cfg.max_score) + 2), color="#1a73e8", edgecolor="white")
    ax.set(xlabel=f"automatic points (of {cfg.max_score:g})", ylabel="students", title="score histogram")
    hist = _png(fig)
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(cfg.checks) + 1))
    rates = [sum(c.id not in r["failed"] for r in rows) / max(1, len(rows)) for c in cfg.checks]
    ax.barh([c.id for c in cfg.checks][::-1], [100 * x for x in rates][::-1], color="#137333")
    ax.set(xlim=(0, 100), xlabel="% of students passing", title="pass rate per check")
    return hist, _png(fig)


def render(course: Path, assignment: str) -> str:
    from autograder.diagnosis import BY_ID
    cfg = config.load(assignment)
    rows = collect(course, assignment)
    hist, rates = _charts(rows, cfg)
    mistakes = defaultdict(set)
    for r in rows:
        for mistake in r["diagnoses"].values():
            mistakes[mistake].add(r["student"])
    fails = Counter(c for r in rows for c in r["failed"])
    e = html.escape
    check_rows = "".join(f"<tr><td>{e(c.id)}</td><td>{e(c.title)}</td><td data-sort='{len(rows) - fails[c.id]}'>"
                         f"{len(rows) - fails[c.id]} / {len(rows)}</td></tr>" for c in cfg.checks)
    mistake_rows = "".join(
        f"<tr><td>{e(BY_ID[m].title if m in BY_ID else m)}</td><td>{len(s)}</td><td>{e(', '.join(sorted(s)))}</td></tr>"
        for m, s in sorted(mistakes.items(), key=lambda kv: -len(kv[1]))) or "<tr><td colspan=3>none</td></tr>"
    student_rows = "".join(
        f"<tr><td>{e(r['student'])}</td><td data-sort='{r['score']}'>{r['score']:g} / {r['max']:g}</td>"
        f"<td>{e(', '.join(r['failed']))}</td><td><a href='{e(r['feedback'])}'>feedback</a></td></tr>" for r in rows)
    errored = "".join(f"<li><b>{e(r['student'])}</b>: {e(r['error'])}</li>" for r in rows if r["error"]) or "<li>none</li>"
    mean = sum(r["score"] for r in rows) / max(1, len(rows))
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(assignment)} class report</title>"
            f"{SELF_CHECK}</head><body><div class='attnkit-report'><style>{STYLE}</style>"
            f"<h1>{e(assignment)}: class report</h1><p id='summary'>{len(rows)} submissions, mean "
            f"{mean:.1f} / {cfg.max_score:g} automatic points.</p>"
            f"<figure><img class='heatmap' alt='score histogram' src='data:image/png;base64,{hist}'></figure>"
            f"<figure><img class='heatmap' alt='pass rate per check' src='data:image/png;base64,{rates}'></figure>"
            f"<h2>Checks</h2><table class='sortable' id='checks'><thead><tr><th>check</th><th>what</th>"
            f"<th>passed</th></tr></thead><tbody>{check_rows}</tbody></table>"
            f"<h2>Named mistakes</h2><table class='sortable' id='mistakes'><thead><tr><th>mistake</th><th>students</th>"
            f"<th>who</th></tr></thead><tbody>{mistake_rows}</tbody></table>"
            f"<h2>Students</h2><table class='sortable' id='students'><thead><tr><th>student</th><th>score</th>"
            f"<th>failed checks</th><th></th></tr></thead><tbody>{student_rows}</tbody></table>"
            f"<h2>Submissions that errored or timed out</h2><ul id='errored'>{errored}</ul>"
            f"</div>{SORT_SCRIPT}</body></html>")


def write_report(course: Path, assignment: str) -> Path:
    out = course / "reports" / f"{assignment}-class-report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(course, assignment))
    return out
