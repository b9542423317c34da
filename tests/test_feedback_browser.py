"""A student's feedback page as `nbgrader generate_feedback` writes it, opened from disk in real headless Chromium
with no network: the notebook's LaTeX is typeset, nothing is fetched, and long failed-check messages wrap.
And formgrader's page of the same submission, served by a real Jupyter server: its LaTeX comes from that server."""
import re
import subprocess
from pathlib import Path

import jinja2
import nbformat
import pytest
from jupyter_core.paths import jupyter_path
from nbgrader.api import Gradebook

from attnkit.course import BIN, nbgrader
from tests.browser import Page, formgrader_server, line_png
from tests.conftest import copy_course
from tests.notebooks import cell

A = "causal_head"
LONG = "x" * 64          # one unbroken word of 64 characters: an attribute the source spells, which a page names
OURS = re.compile(r"<!-- MathJax 3\.2\.2 .*?<!-- end of attnkit's MathJax -->", re.S)

# Every check fails with the same long message, the exception's text (the judge keeps 200 characters of it).
LONG_MESSAGES = ("import torch\nclass Head(torch.nn.Module):\n    def __init__(self, *a, **k):\n"
                 f"        super().__init__()\n        self.{LONG}\n")

# What MathJax leaves of a formula is the browser's MathML in an mjx-container; raw TeX is a backslash command or a
# dollar.
LATEX_STATE = """(async () => {
    if (window.attnkitMath) await window.attnkitMath;  // attnkit's MathJax, unpacked and typeset
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
    const cells = Array.from(document.querySelectorAll('.text_cell_render'));
    const text = e => { const c = e.cloneNode(true); c.querySelectorAll('code, pre').forEach(x => x.remove());
                        return c.textContent; };
    const head = cells.find(e => e.textContent.includes('4.1 The head'));
    return {head_math: head.querySelectorAll('mjx-container math').length,
            head_raw: /\\\\operatorname|\\$/.test(text(head)),
            containers: document.querySelectorAll('mjx-container').length,
            raw_cells: cells.filter(e => /\\\\(frac|tfrac|sqrt|operatorname)\\b|\\$/.test(text(e))).length,
            merrors: document.querySelectorAll('mjx-container merror').length};
})()"""


def _wide_png() -> str:
    return line_png((15.65, 2), 100)                     # 1565 px wide


@pytest.fixture(scope="module")
def feedback(tmp_path_factory, released_course):
    """lee's feedback page: graded by `attnkit autograde` (no kernel), written by `nbgrader generate_feedback`."""
    course = copy_course(released_course, tmp_path_factory.mktemp("feedback") / "course")
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    cell(nb, "head").source = LONG_MESSAGES
    (course / "submitted" / "lee" / A).mkdir(parents=True)
    nbformat.write(nb, course / "submitted" / "lee" / A / f"{A}.ipynb")
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A], cwd=course, capture_output=True, text=True, timeout=600)
    assert "1 graded" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    # a figure 1565 px wide (figsize 15.65 in at 100 dpi), as a kernel that runs the notebook (nbgrader autograde)
    # leaves a plot in the autograded notebook that generate_feedback renders
    graded = course / "autograded" / "lee" / A / f"{A}.ipynb"
    nb = nbformat.read(graded, as_version=4)
    cell(nb, "head").outputs = [nbformat.v4.new_output("display_data", data={"image/png": _wide_png(),
                                                                             "text/plain": "<Figure>"})]
    nbformat.write(nb, graded)
    nbgrader("generate_feedback", A, cwd=course)
    return course / "feedback" / "lee" / A / f"{A}.html"


@pytest.fixture
def offline():
    with Page(width=1024, height=768) as page:
        page.go_offline()
        yield page


def _fetched(page) -> list:
    """What the page asked the network for (its own file and inline data do not count)."""
    page.evaluate("0")
    return [u for u in page.requests if not u.startswith(("file:", "data:"))]


def test_latex_renders_from_disk_without_network(feedback, offline):
    html = feedback.read_text()
    assert "cdnjs" not in html and "<script src=" not in html and len(OURS.findall(html)) == 1
    offline.open(feedback)
    state = offline.evaluate(LATEX_STATE)
    assert state["head_math"] >= 1 and not state["head_raw"], state      # 4.1's display formula, typeset
    assert state["containers"] >= 20 and state["raw_cells"] == 0 and state["merrors"] == 0, state
    assert _fetched(offline) == []
    assert offline.errors() == []


def test_the_stock_cdn_macro_leaves_latex_raw_offline(feedback, offline, tmp_path):
    """The same page with nbconvert's own mathjax() output in place of attnkit's: what the check above catches."""
    base = next(Path(d) for d in jupyter_path("nbconvert", "templates", "base") if Path(d, "mathjax.html.j2").exists())
    stock = jinja2.Environment(loader=jinja2.FileSystemLoader(base)).get_template("mathjax.html.j2").module.mathjax()
    assert "cdnjs.cloudflare.com" in stock
    page = tmp_path / "stock.html"
    page.write_text(OURS.sub(lambda _: stock, feedback.read_text()))
    offline.open(page)
    state = offline.evaluate(LATEX_STATE)
    assert state["head_math"] == 0 and state["head_raw"] and state["containers"] == 0, state
    assert any("cdnjs.cloudflare.com" in u for u in _fetched(offline))
    assert any("ERR_INTERNET_DISCONNECTED" in text for _, text in offline.errors()), offline.errors()


def test_long_failed_check_messages_wrap_at_1024_px(feedback, offline):
    offline.open(feedback)
    offline.evaluate(LATEX_STATE)                                    # laid out as the TA sees it: maths typeset
    shown = offline.evaluate(f"""[
        Array.from(document.querySelectorAll('.attnkit-report td.message')).filter(
            t => t.textContent.includes({LONG!r})),
        Array.from(document.querySelectorAll('.output_error pre')).filter(p => p.textContent.includes({LONG!r}))
    ].map(found => found.length)""")
    assert shown[0] == 14 and shown[1] >= 10, shown                  # the report's table, the notebook's verdicts
    width = offline.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert width[1] == 1024 and width[0] <= width[1], width
    # each message wraps where it is: no cell or output scrolls sideways (the code cells may, as in Jupyter)
    overflowing = offline.evaluate("""Array.from(document.querySelectorAll(
        'td, th, li, .output_subarea, .output_error pre')).filter(e => e.scrollWidth > e.clientWidth + 1).map(
        e => e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 60))""")
    assert overflowing == []
    assert offline.errors() == []


def test_a_wide_figure_scales_to_the_page_at_1024_px(feedback, offline):
    offline.open(feedback)
    offline.evaluate(LATEX_STATE)
    figure = offline.evaluate("""(() => { const i = Array.from(document.querySelectorAll('.output_area img')).find(
        i => i.naturalWidth === 1565); return i && [i.naturalWidth, i.getBoundingClientRect().right, innerWidth]; })()""")
    assert figure is not None, "the 1565 px figure is not on the page"
    assert figure[1] <= figure[2] == 1024, figure                              # scaled to fit, not cut off
    width = offline.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert width[0] <= width[1] == 1024, width                                  # the page never scrolls sideways


@pytest.fixture(scope="module")
def formgrader(feedback):
    """formgrader on the graded course (tests/browser.formgrader_server): the URL of lee's submission page."""
    course = feedback.parents[3]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission_notebook(A, A, "lee").id
    with formgrader_server(course) as base:
        yield f"{base}/formgrader/submissions/{submission}/"


def test_formgrader_typesets_with_mathjax_from_its_own_server(formgrader):
    """formgrade.js is written for MathJax 2 (MathJax.Hub): jupyter-server-mathjax serves 2.7 from the same server."""
    origin = formgrader.split("/formgrader/")[0]
    with Page(width=1024, height=768) as page:
        page.send("Network.enable")                             # record every request (none may leave the server)
        page.open_url(formgrader)
        state = page.evaluate("""(async () => {
            for (let i = 0; i < 300 && !(window.MathJax && MathJax.loaded); i++)    // formgrade.js's own flag
                await new Promise(r => setTimeout(r, 100));
            const head = Array.from(document.querySelectorAll('.text_cell_render')).find(
                e => e.textContent.includes('4.1 The head'));
            const text = head.cloneNode(true);
            text.querySelectorAll('code, pre, script, .MathJax_Preview, .MJX_Assistive_MathML').forEach(
                x => x.remove());
            return {version: window.MathJax && MathJax.version, typeset: !!(window.MathJax && MathJax.loaded),
                    head_math: head.querySelectorAll('.MathJax_Display').length,
                    head_raw: /\\\\operatorname|\\$/.test(text.textContent)};
        })()""")
        assert state == {"version": "2.7.9", "typeset": True, "head_math": 1, "head_raw": False}, state
        assert [u for u in page.requests if not u.startswith((origin, "data:", "about:blank"))] == []
        assert any("/static/jupyter_server_mathjax/MathJax.js" in u for u in page.requests)
        assert [t for k, t in page.errors() if k == "exception"] == []     # formgrade.js's start-up found MathJax.Hub
