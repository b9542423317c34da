"""`attnkit report ASSIGNMENT`: one offline HTML page for the TAs of a graded class.

Reads what grading recorded: automatic points per test cell from the nbgrader gradebook (wherever the course's
nbgrader configuration keeps it: attnkit/gradebook.py), and the judge's result (messages, diagnoses, errors)
that JudgeGradeCells stored in each autograded notebook.
Shows the score histogram, the pass rate of every check, how often each named mistake occurred and
who hit it, a sortable table of students linking their feedback, and the submissions that errored:
the judge could not load them (its result has an ``error``), or grading made no autograded notebook
at all (a submitted file that is not valid JSON, say), which are found under ``submitted/``.

Every string in the page that a student could have written (student ids are folder names, messages
quote the submission's own exception text) goes through the Jinja2 template
``templates/class_report.html.j2`` with autoescape on (attnkit/nbgrader_ext/templating.py, the environment every page
of the kit shares): nothing here builds HTML by hand.
"""
from __future__ import annotations

import glob
import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import quote

from attnkit import gradebook
from attnkit.autograde.markers import STATE_DIR
from attnkit.engine import config
from attnkit.course import gradebook_scores
from attnkit.nbgrader_ext.templating import render as render_template
from attnkit.isolation import untrusted
import base64
import io
from attnkit.nbgrader_ext.figure_style import kit_style
from attnkit.engine.diagnosis import by_id, title as diagnosis_title

ERROR_CHARS = 400          # an error is a sentence; a traceback is cut to its last line and this many characters


def _read(path: Path):
    """The notebook at ``path`` read inside the judge's caps, or the sentence saying why it cannot be."""
    try:
        return untrusted.read_notebook(path), None
    except untrusted.UnreadableNotebook as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - one notebook the kit failed to read must not cost the page
        return None, f"the kit could not read it ({type(e).__name__}: {str(e)[:200]})"


def _judge_result(nb) -> tuple[str | None, list[dict]]:
    """(error, checks) of the judge's result stored in an autograded notebook, read defensively."""
    result = nb.metadata.get("attnkit")
    if not isinstance(result, dict):          # graded by a pipeline without JudgeGradeCells: the gradebook's word
        return None, []
    error = result.get("error")
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict) and isinstance(c.get("id"), str)]
    return (None if error in (None, "") else str(error)), checks


def _points(check: dict) -> float:
    try:
        return float(check.get("points") or 0)
    except (TypeError, ValueError):
        return 0.0


def _condensed(failure: str) -> str:
    """One line of a grading failure (often a whole traceback): the last exception line, if any."""
    lines = [ln.strip() for ln in failure.splitlines() if ln.strip()]
    raised = [ln for ln in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b:?", ln)]
    text = (raised or lines or ["grading failed"])[-1]
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "..."


def _last_run_failures(course: Path, assignment: str) -> dict[str, str]:
    """Student -> why `attnkit autograde` failed on them, from its last run (empty when there is none)."""
    try:
        failed = json.loads((course / STATE_DIR / assignment / "last_run.json").read_text())["failed"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(s): str(e) for s, e in failed.items()} if isinstance(failed, dict) else {}


def _folder(coursedir, step: str, student: str, assignment: str) -> Path:
    """Where nbgrader keeps ``step`` (submitted, autograded, feedback) of one student's assignment, as the
    course's configuration says (CourseDirectory's folders and directory_structure)."""
    return Path(coursedir.format_path(getattr(coursedir, f"{step}_directory"), student, assignment, escape=False))


def _submitted(coursedir, assignment: str, notebook: str) -> dict[str, Path]:
    """Student -> submitted notebook, for every student whose submitted folder of ``assignment`` holds one."""
    # as nbgrader's converters find them: a glob of the path with '*' for the student, then its regular expression
    pattern = re.compile(coursedir.format_path(coursedir.submitted_directory, "(?P<student_id>[^/]+)",
                                               re.escape(assignment), escape=True) + re.escape(f"/{notebook}.ipynb") + "$")
    found = {}
    for path in sorted(glob.glob(str(_folder(coursedir, "submitted", "*", assignment) / f"{notebook}.ipynb"))):
        m = pattern.match(path)
        if m and Path(path).is_file():
            found[m.group("student_id")] = Path(path)
    return found


def collect(course: Path, assignment: str) -> list[dict]:
    """Per student: automatic score, failed checks with the judge's sentences, diagnoses and error.

    Every student with a submission in the gradebook or a submitted notebook appears, graded or not.
    ``judged``: an autograded notebook exists (False: grading never got that far, and ``score`` is None:
    the gradebook's 0 for such a submission is no verdict, so it counts in no mean and no pass rate)."""
    cfg = config.load(assignment)
    cells = cfg.by_cell()
    coursedir = gradebook.load_app(course).coursedir
    reports = report_path(course, assignment).parent
    scores = gradebook_scores(course, assignment)
    submitted = _submitted(coursedir, assignment, cfg.notebook)
    failures = _last_run_failures(course, assignment)
    rows = []
    for student in sorted(set(scores) | set(submitted)):
        g = scores.get(student)
        row = {"student": student, "score": None, "max": cfg.max_score, "failed": [], "messages": {},
               "diagnoses": {}, "error": None, "judged": False, "feedback": None}
        autograded = _folder(coursedir, "autograded", student, assignment) / f"{cfg.notebook}.ipynb"
        nb, unreadable = _read(autograded) if autograded.is_file() else (None, None)
        if nb is not None:                                  # graded: the gradebook's points, the judge's words
            row["judged"] = True
            row["error"], checks = _judge_result(nb)
            failed = [c for c in checks if not c.get("passed")]
            row["messages"] = {c["id"]: str(c.get("message") or "") for c in failed}
            row["diagnoses"] = {c["id"]: str(c["diagnosis_id"]) for c in failed if c.get("diagnosis_id")}
            if g is not None:
                row["score"] = float(g["auto"])
                row["failed"] = [cells[name].id for name in g["lost"] if name in cells]
            elif checks:                                    # not in the gradebook: the judge's own verdicts
                row["score"] = sum(_points(c) for c in checks)
                row["failed"] = [c["id"] for c in failed]
            page = _folder(coursedir, "feedback", student, assignment) / f"{cfg.notebook}.html"
            row["feedback"] = "/".join(quote(part, safe="") for part in Path(os.path.relpath(page, reports)).parts)
        elif unreadable:
            row["error"] = f"the autograded notebook could not be read: {unreadable}"
        else:                                               # grading made nothing (nbgrader removes a failed
            sub = submitted.get(student)                    # one): say why, in one sentence
            unreadable = _read(sub)[1] if sub is not None else None
            if unreadable:
                row["error"] = unreadable
            elif student in failures:
                row["error"] = f"grading failed: {_condensed(failures[student])}"
            else:
                row["error"] = ("not autograded: there is no autograded notebook (run attnkit autograde "
                                f"{assignment}, or nbgrader autograde {assignment})")
        rows.append(row)
    return rows


def _png(fig) -> str:
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _charts(rows, judged, cfg) -> tuple[str, str]:
    with kit_style():
        return _drawn_charts(rows, judged, cfg)


def score_histogram(scores: list[float], max_score: float):
    """The histogram's figure: one bar per point, centred on it. Its axes count students and points, so their ticks
    are whole numbers (matplotlib's default locator put 0.5 students on a class of five), and none lies past the
    maximum (bars on [k, k+1) put the full marks' bar at 20-21 and a tick at 21)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    fig, ax = plt.subplots(figsize=(6, 3))
    top = int(max_score)
    ax.hist(scores, bins=[k - 0.5 for k in range(0, top + 2)], color="#1a73e8", edgecolor="white")
    ax.set_xlim(-0.5, top + 0.5)
    ax.set(xlabel=f"automatic points (of {max_score:g})", ylabel="students", title="score histogram")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _drawn_charts(rows, judged, cfg) -> tuple[str, str]:
    import matplotlib.pyplot as plt
    hist = _png(score_histogram([r["score"] for r in rows if r["score"] is not None], cfg.max_score))
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(cfg.checks) + 1))
    rates = [sum(c.id not in r["failed"] for r in judged) / max(1, len(judged)) for c in cfg.checks]
    ax.barh([c.id for c in cfg.checks][::-1], [100 * x for x in rates][::-1], color="#137333")
    ax.set(xlim=(0, 100), xlabel="% of judged submissions passing", title="pass rate per check")
    return hist, _png(fig)


def _num(x: float) -> str:
    return f"{x:g}"


def render(course: Path, assignment: str) -> str:
    cfg = config.load(assignment)
    rows = collect(Path(course), assignment)
    judged = [r for r in rows if r["judged"]]
    hist, rates = _charts(rows, judged, cfg)
    known = by_id(assignment)

    def title(mistake_id: str) -> str:
        return diagnosis_title(mistake_id, known)

    who = defaultdict(set)
    for r in rows:
        for mistake in r["diagnoses"].values():
            who[mistake].add(r["student"])
    fails = Counter(c for r in judged for c in r["failed"])
    scored = [r["score"] for r in rows if r["score"] is not None]
    students = [{**r, "score_text": "-" if r["score"] is None else f"{_num(r['score'])} / {_num(r['max'])}",
                 "score_sort": "" if r["score"] is None else _num(r["score"]),
                 "mistakes": sorted({title(m) for m in r["diagnoses"].values()}),
                 "failed_checks": [(c, r["messages"].get(c, "")) for c in r["failed"]]} for r in rows]
    return render_template(
        "class_report.html.j2", assignment=assignment, max_score=_num(cfg.max_score),
        hist=hist, rates=rates, n=len(rows), n_judged=len(judged),
        mean=f"{sum(scored) / len(scored):.1f}" if scored else "-",
        checks=[{"id": c.id, "title": c.title, "passed": len(judged) - fails[c.id]} for c in cfg.checks],
        mistakes=[{"title": title(m), "count": len(s), "who": ", ".join(sorted(s))}
                  for m, s in sorted(who.items(), key=lambda kv: (-len(kv[1]), title(kv[0])))],
        students=students, errored=[r for r in rows if r["error"]])


def report_path(course: Path, assignment: str) -> Path:
    return Path(course).resolve() / "reports" / f"{assignment}-class-report.html"


def write_report(course: Path, assignment: str) -> Path:
    out = report_path(course, assignment)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(course, assignment), encoding="utf-8")
    return out
