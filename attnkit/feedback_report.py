"""The teaching report: score, each check with its message and diagnosis, and the student's attention
pattern beside a correct one on the same input, with the cells that differ outlined.

Built from a judge result only (numbers and sentences): no test source, no reference code.
One self-contained HTML page (images embedded), or a fragment to put at the top of nbgrader's feedback.
"""
from __future__ import annotations

import base64
import functools
import html
import io
import math
from pathlib import Path

DIFF = 1e-4

STYLE = """
.attnkit-report{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:980px;margin:1em auto;
  color:#1d1d1f;line-height:1.45}
.attnkit-report h1{font-size:1.5em;margin:.2em 0}.attnkit-report .score{font-size:2.2em;font-weight:700}
.attnkit-report table{border-collapse:collapse;width:100%;margin:1em 0}
.attnkit-report td,.attnkit-report th{border-bottom:1px solid #ddd;padding:.45em .6em;text-align:left;vertical-align:top}
.attnkit-report .pass{color:#137333;font-weight:600}.attnkit-report .fail{color:#b3261e;font-weight:600}
.attnkit-report .diagnosis{background:#fff4e5;border-left:4px solid #f29900;padding:.35em .6em;margin-top:.3em}
.attnkit-report .error{background:#fce8e6;border-left:4px solid #b3261e;padding:.5em .8em}
.attnkit-report figure{display:inline-block;margin:.5em 1em .5em 0;text-align:center}
.attnkit-report figcaption{font-size:.9em;color:#555}
.attnkit-report td.message,.attnkit-report .error{overflow-wrap:anywhere}  /* a long word breaks, not the page */
"""

# nbgrader's feedback shows the graded notebook below the report, where a failed check's verdict is an error
# output (nbgrader_steps.verdict_outputs) in a <pre> that nbconvert never wraps: a long sentence, or a long
# word of the student's exception text, would make the whole page scroll sideways.
NOTEBOOK_STYLE = ".output_error pre{white-space:pre-wrap;overflow-wrap:anywhere}"

SELF_CHECK = """<script>
window.addEventListener('error', function () {
  document.body.dataset.jsErrors = String(Number(document.body.dataset.jsErrors || 0) + 1); });
window.addEventListener('load', function () {
  var imgs = document.querySelectorAll('img.heatmap'), ok = 0;
  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) ok++; });
  document.body.dataset.heatmapsLoaded = String(ok);
});
</script>"""


def nbconvert_template_dirs() -> list[str]:
    """The course's HTMLExporter.extra_template_basedirs (grading_config/nbgrader_config.py): attnkit's first,
    whose base/mathjax.html.j2 inlines MathJax in place of nbconvert's CDN macro, then nbgrader's own
    feedback and formgrade templates (which nbgrader puts there itself only when the setting is unset)."""
    import nbgrader
    return [str(Path(__file__).parent / "templates" / "nbconvert"),
            str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]


@functools.cache
def mathjax_source(component: str) -> str:
    """A MathJax 3 component's JavaScript (``tex-svg-full.js``, ...) from the venv, to sit inside an inline
    ``<script>`` (the Jinja filter of templates/nbconvert/base/mathjax.html.j2)."""
    import mathjax                          # django-static-mathjax: MathJax's own release files, no Django
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    # "</script" would end the inline script early (none is in 3.2.2; "<\/" means the same in JavaScript)
    return (es5 / component).read_text(encoding="utf-8").replace("</script", "<\\/script")


def _matrix(rows):
    import numpy as np
    return np.array([[math.nan if v is None else v for v in row] for row in rows], dtype=float)


def heatmap_png(values, title: str, differs=None) -> str:
    """A heatmap as a base64 PNG; cells in ``differs`` are outlined in red."""
    import matplotlib
    matplotlib.use("Agg")
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


def _pictures(pattern) -> str:
    if not pattern:
        return ""
    import numpy as np
    expected = _matrix(pattern["expected"])
    parts = [f"<h2>Your attention pattern</h2><p>{html.escape(pattern['caption'])}</p>"]
    if pattern.get("student") is None:
        parts.append("<p class='error'>No attention weights could be read from your submission on this input "
                     "(see the failed checks above).</p>")
    else:
        student = _matrix(pattern["student"])
        differs = ~np.isclose(student, expected, atol=DIFF, equal_nan=True)
        n_diff = int(differs.sum())
        parts.append(f"<figure><img class='heatmap' alt='your attention weights' src='data:image/png;base64,"
                     f"{heatmap_png(student, 'yours', differs)}'><figcaption>yours"
                     f"{f' - {n_diff} cells differ (red)' if n_diff else ' - identical'}</figcaption></figure>")
    parts.append(f"<figure><img class='heatmap' alt='expected attention weights' src='data:image/png;base64,"
                 f"{heatmap_png(expected, 'expected')}'><figcaption>a correct implementation</figcaption></figure>")
    return "".join(parts)


def fragment(result: dict, student: str | None = None) -> str:
    """The report's body, usable inside another page (nbgrader's feedback)."""
    who = f" - {html.escape(student)}" if student else ""
    rows = []
    for c in result["checks"]:
        status = "<span class='pass'>passed</span>" if c["passed"] else "<span class='fail'>failed</span>"
        detail = "" if c["passed"] else html.escape(c["message"])
        if c.get("diagnosis") and not c["passed"]:
            detail += f"<div class='diagnosis'><b>Diagnosis:</b> {html.escape(c['diagnosis'].split('. ', 1)[0])}</div>"
        rows.append(f"<tr><td>{html.escape(c.get('title') or c['id'])}<br><code>{html.escape(c['id'])}</code></td>"
                    f"<td>{c['points']:g} / {c['max_points']:g}</td><td>{status}</td>"
                    f"<td class='message'>{detail}</td></tr>")
    error = f"<p class='error'>{html.escape(result['error'])}</p>" if result.get("error") else ""
    named = dict.fromkeys(c["diagnosis"] for c in result["checks"] if not c["passed"] and c.get("diagnosis"))
    summary = "".join(f"<div class='diagnosis' id='diagnosis'><b>What went wrong:</b> {html.escape(d)}</div>"
                      for d in named)
    return (f"<div class='attnkit-report'><style>{STYLE}{NOTEBOOK_STYLE}</style>"
            f"<h1>{html.escape(result['assignment'])}{who}: automatic checks</h1>"
            f"<div class='score' id='score'>{result['score']:g} / {result['max_score']:g}</div>{error}{summary}"
            f"<table><thead><tr><th>check</th><th>points</th><th></th><th>what happened</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{_pictures(result.get('attention'))}</div>")


def page(result: dict, student: str | None = None) -> str:
    """A self-contained HTML page (works offline, images embedded)."""
    title = html.escape(f"{result['assignment']} feedback" + (f" - {student}" if student else ""))
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
            f"{SELF_CHECK}</head><body>{fragment(result, student)}</body></html>")
