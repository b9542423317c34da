"""The teaching report: score, each check with its message and diagnosis, and the student's attention
pattern beside a correct one on the same input, with the cells that differ outlined.

Built from a judge result only (numbers and sentences): no test source, no reference code.
One self-contained HTML page (images embedded), or a fragment to put at the top of nbgrader's feedback, both
rendered from templates/feedback_*.html.j2 with autoescape on (attnkit/nbgrader_ext/templating.py): nothing here builds HTML.
"""
from __future__ import annotations

import base64
import functools
import io
import math
import re
from pathlib import Path

from attnkit.engine.channel import PICTURE_STEP
from attnkit.nbgrader_ext.templating import TEMPLATES, render
from attnkit.nbgrader_ext.figure_style import kit_style

DIFF = 1e-4


def nbconvert_template_dirs() -> list[str]:
    """The course's HTMLExporter.extra_template_basedirs (grading_config/nbgrader_config.py): attnkit's first,
    whose base/mathjax.html.j2 inlines MathJax in place of nbconvert's CDN macro, then nbgrader's own
    feedback and formgrade templates (which nbgrader puts there itself only when the setting is unset)."""
    import nbgrader
    return [str(TEMPLATES / "nbconvert"),
            str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]


@functools.cache
def mathjax_source(components: str) -> str:
    """MathJax 3's components (``"startup.js core.js ..."``, from the venv) as one script, gzip-compressed and
    base64-encoded, for the page to unpack with the browser's own DecompressionStream (the Jinja filter of
    templates/nbconvert/base/mathjax.html.j2): 0.17 MB in every page for 0.6 MB of JavaScript."""
    import base64
    import gzip
    import mathjax                          # django-static-mathjax: MathJax's own release files, no Django
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    code = "\n;\n".join((es5 / c).read_text(encoding="utf-8") for c in components.split())
    return base64.b64encode(gzip.compress(code.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def _matrix(rows):
    import numpy as np
    return np.array([[math.nan if v is None else v for v in row] for row in rows], dtype=float)


def heatmap_png(values, title: str, differs=None) -> str:
    """A heatmap as a base64 PNG; cells in ``differs`` are outlined in red."""
    with kit_style():
        return _heatmap_png(values, title, differs)


def _heatmap_png(values, title: str, differs) -> str:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(3.3, 3.3), dpi=100)
    ax.imshow(values, cmap="Blues", vmin=0, vmax=1)
    n = values.shape[0]
    for i in range(n):
        for j in range(values.shape[1]):
            v = values[i, j]
            ax.text(j, i, "NaN" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if not math.isnan(v) and v > 0.6 else "black")
            if differs is not None and differs[i, j]:
                ax.add_patch(Rectangle((j - .5, i - .5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(n))
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _pattern(pattern) -> dict | None:
    """The attention section's figures: the heatmaps as base64 PNGs, and how many cells differ."""
    if not pattern:
        return None
    import numpy as np
    expected = _matrix(pattern["expected"])
    shown = {"caption": pattern["caption"], "yours": None, "n_diff": 0, "expected": heatmap_png(expected, "expected")}
    if pattern.get("student") is not None:
        student = _matrix(pattern["student"])
        # the student's picture is rounded to PICTURE_STEP before it leaves the judge (channel.picture): a cell
        # differs when no value within half a step of it is the expected one (a correct head showed 20 red cells)
        differs = ~np.isclose(student, expected, atol=PICTURE_STEP / 2 + DIFF, rtol=0, equal_nan=True)
        shown.update(yours=heatmap_png(student, "yours", differs), n_diff=int(differs.sum()))
    return shown


def named_cause(check: dict) -> str | None:
    """The mistake the judge named for a failed check, or None when it named none: no diagnosis, the
    catalogue's "no known pattern", or a diagnosis without a catalogue id (``diagnosis_id`` None)."""
    from attnkit.engine.diagnosis import NO_PATTERN
    text = check.get("diagnosis")
    if check.get("passed") or not text or text == NO_PATTERN or ("diagnosis_id" in check and check["diagnosis_id"] is None):
        return None
    return text


def causes(checks: list[dict]) -> list[dict]:
    """One entry per distinct named cause, in the order of the first check it explains, with the checks it
    explains: the page says each cause once, however many checks it fails (issue 32)."""
    grouped: dict = {}
    for c in checks:
        text = named_cause(c)
        if text is not None:
            key = c.get("diagnosis_id") or text
            grouped.setdefault(key, {"text": text, "checks": []})["checks"].append(c["id"])
    return list(grouped.values())


# The child's own words for a NotImplementedError, the release stubs' (attnkit/isolation/child_runtime.py
# describe_error: "__init__ raised NotImplementedError: not answered yet (at cell 4, line 23)")
STUB = re.compile(r"\bNotImplementedError: not answered yet\b")


def unanswered(result: dict) -> bool:
    """Whether the notebook is as released: every check failed on a stub's NotImplementedError, so there is
    nothing to diagnose. Wording only: the score is the judge's either way."""
    checks = result.get("checks") or []
    return bool(checks) and not result.get("error") and all(
        not c["passed"] and STUB.search(str(c.get("message") or "")) for c in checks)


def _context(result: dict, student: str | None, written: dict | None = None) -> dict:
    """What the templates print: the judge's result as text, numbers formatted. ``written``: the written
    answer's state in the gradebook (nbgrader's feedback), None where the page does not know it."""
    blank = unanswered(result)
    return {
        "assignment": result["assignment"], "student": student or None,
        "score": f"{result['score']:g}", "max_score": f"{result['max_score']:g}", "error": result.get("error"),
        "unanswered": blank, "written": written,
        "causes": [] if blank else causes(result["checks"]),
        "checks": [{"id": c["id"], "title": c.get("title") or c["id"], "passed": c["passed"],
                    "points": f"{c['points']:g}", "max_points": f"{c['max_points']:g}", "message": c["message"]}
                   for c in result["checks"]],
        "pattern": _pattern(result.get("attention"))}


# For the page around the report in nbgrader's feedback: a failed check's verdict is an error output
# (nbgrader_steps.verdict_outputs) in a <pre> that nbconvert never wraps, so a long sentence, or a long word of
# the student's exception text, would make the whole page scroll sideways.
WRAP_VERDICTS = ".output_error pre{white-space:pre-wrap;overflow-wrap:anywhere}"


def report_css() -> str:
    """The style the fragment needs from the page that holds it (it carries none: it is cleaned as markdown)."""
    return render("report_style.css.j2") + "\n" + WRAP_VERDICTS


def fragment(result: dict, student: str | None = None, written: dict | None = None) -> str:
    """The report's body, usable inside another page (nbgrader's feedback, as a markdown cell). ``written``:
    {"graded": bool, "score": str, "max": str} of the written answer, shown beside the automatic points."""
    return render("feedback_report.html.j2", **_context(result, student, written))


def page(result: dict, student: str | None = None) -> str:
    """A self-contained HTML page (works offline, images embedded)."""
    return render("feedback_page.html.j2", **_context(result, student))
