"""The class report of a graded class, in real headless Chromium: content, sorting, errors, wrapping, escaping."""
import functools
import re
import subprocess

import nbformat
import pytest

from attnkit.course import BIN
from attnkit.demo import sample_class
from tests.browser import Page, render
from tests.conftest import copy_course
from attnkit.mutants import module as corpus
from tests.notebooks import cell, solution_source

A = "causal_head"
XSS = "<img src=x onerror=document.body.dataset.pwned=1>"          # a student id is a folder name: student text
SCRIPT = "<script>document.body.dataset.pwned=2</script>"
LONG = "x" * 150                                                    # one unbroken word of 150 characters


def _submit(course, student, answer=None, raw=None):
    dest = course / "submitted" / student / A
    dest.mkdir(parents=True)
    if raw is not None:
        (dest / f"{A}.ipynb").write_text(raw)
        return
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    cell(nb, "head").source = answer
    nbformat.write(nb, dest / f"{A}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory, released_course):
    """A small class graded by `attnkit autograde`, and its report: the demo's five students, fay (4 / 20: a
    one-digit score, so a textual sort would put it after 20), kim (the judge cannot load her definitions),
    zoe (not valid JSON), a student whose id and exception text are HTML, and ned (submitted after grading)."""
    course = copy_course(released_course, tmp_path_factory.mktemp("class") / "course")
    sample_class(course, A)
    _submit(course, "fay", corpus(A).mutate(solution_source(A, "head"), "diagonal_masked"))
    _submit(course, "kim", "import os\nclass Head:\n    os._exit(3)\n")
    _submit(course, "zoe", raw='{"cells": [')
    _submit(course, XSS, "import torch\nclass Head(torch.nn.Module):\n    def __init__(self, *a, **k):\n"
                         f"        super().__init__()\n        raise ValueError({SCRIPT + LONG!r})\n")
    p = subprocess.run([str(BIN / "attnkit"), "autograde", A, "--jobs", "2"], cwd=course,
                       capture_output=True, text=True, timeout=600)
    assert "8 graded, 0 already graded, 1 failed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    _submit(course, "ned", solution_source(A, "head"))
    p = subprocess.run([str(BIN / "attnkit"), "report", A], cwd=course, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    page = course / "reports" / f"{A}-class-report.html"
    assert p.stdout.strip() == str(page)
    return course, page


@pytest.fixture
def browser():
    with Page(width=1024, height=768) as page:
        yield page


def test_class_report_shows_histogram_checks_mistakes_and_students(graded):
    _, page = graded
    dom = render(page)
    assert re.search(r'data-heatmaps-loaded="2"', dom) and "data-js-errors" not in dom
    assert "10 submissions (8 graded, 3 errored)" in dom
    students = re.search(r'<table class="sortable" id="students">.*?</table>', dom, re.S).group(0)
    assert students.count("<tr>") == 11                         # header + one row per student
    assert "Mask applied after the softmax" in dom and "No 1/sqrt(d_k) scaling" in dom
    assert "feedback/cy/causal_head/causal_head.html" in dom
    # a failed check carries the judge's sentence, not only its name
    assert re.search(r"<b>scaling</b>: <span class=\"message\">[^<]*sqrt", students)


def _rows(page, table):
    """Per body row of ``table``: its text (its identity) and each cell's sort key as the page defines it."""
    return page.evaluate(f"""Array.from(document.querySelectorAll('#{table} tbody tr')).map(r => ({{
        id: r.textContent,
        keys: Array.from(r.cells).map(c => c.hasAttribute('data-sort') ? c.getAttribute('data-sort')
                                                                       : c.textContent.trim())}}))""")


def _expected(page, rows, col, numeric, ascending):
    """The rows sorted as the report promises, computed here: numbers numerically (no number first), text with
    the browser's collator; a stable sort, so ties keep the order the rows had before the click."""
    keys = [r["keys"][col] for r in rows]
    if numeric:
        values = [(0, 0.0) if k == "" else (1, float(k)) for k in keys]

        def cmp(i, j):
            return (values[i] > values[j]) - (values[i] < values[j])
    else:
        matrix = page.evaluate(f"""(() => {{
            const c = new Intl.Collator(undefined, {{numeric: true, sensitivity: 'base'}}), t = {keys!r}; return t.map(a => t.map(b => Math.sign(c.compare(a, b)))); }})()""")

        def cmp(i, j):
            return matrix[i][j]
    order = sorted(range(len(rows)), key=functools.cmp_to_key(cmp if ascending else lambda i, j: -cmp(i, j)))
    return [rows[i]["id"] for i in order]


def test_every_sortable_header_sorts_both_ways_in_chromium(graded, browser):
    _, page = graded
    browser.open(page)
    tables = browser.evaluate("Array.from(document.querySelectorAll('table.sortable')).map(t => t.id)")
    assert tables == ["checks", "mistakes", "students"]
    clicked = 0
    for table in tables:
        heads = browser.evaluate(f"""Array.from(document.querySelectorAll('#{table} thead th')).map(
            th => th.getAttribute('data-type'))""")
        assert heads.count("number") == 1, (table, heads)          # passed / students / score
        for col, kind in enumerate(heads):
            if kind is None:
                continue
            for ascending in (True, False):                        # first click ascending, the second descending
                before = _rows(browser, table)
                browser.click(f"#{table} thead th", col)
                after = [r["id"] for r in _rows(browser, table)]
                assert after == _expected(browser, before, col, kind == "number", ascending), (table, col, ascending)
                state = browser.evaluate(
                    f"document.querySelectorAll('#{table} thead th')[{col}].getAttribute('aria-sort')")
                assert state == ("ascending" if ascending else "descending")
                clicked += 1
    assert clicked == 2 * (3 + 3 + 4)

    # spot checks, independent of the collator: the score sorts as a number, the student id as text
    browser.click("#students thead th", 0)
    names = [r["keys"][0] for r in _rows(browser, "students")]
    assert names == sorted(names)
    browser.click("#students thead th", 1)
    scores = [r["keys"][1] for r in _rows(browser, "students")]
    assert scores[:2] == ["", ""] and [float(s) for s in scores[2:]] == sorted(float(s) for s in scores[2:])
    two_digits = next(s for s in scores[2:] if float(s) >= 10)
    assert scores.index("4") < scores.index(two_digits)           # "11" < "4" as text
    assert browser.errors() == [] and browser.evaluate("document.body.dataset.jsErrors") is None


def test_errored_and_unloadable_submissions_are_listed(graded, browser):
    _, page = graded
    browser.open(page)
    errored = dict(browser.evaluate("""Array.from(document.querySelectorAll('#errored li')).map(
        li => [li.querySelector('b').textContent, li.textContent])"""))
    assert sorted(errored) == ["kim", "ned", "zoe"]
    assert "not valid JSON" in errored["zoe"]                      # nbgrader could not even read it
    assert "could not be loaded" in errored["kim"] and "exited (status 3)" in errored["kim"]   # the judge's error
    assert "not autograded" in errored["ned"]
    row = dict(browser.evaluate("""Array.from(document.querySelectorAll('#students tbody tr')).map(
        r => [r.cells[0].textContent, r.cells[2].textContent + ' | ' + r.cells[1].textContent])"""))
    for student in ("kim", "zoe", "ned"):                          # ... and in the table, said so
        assert row[student].startswith("errored"), row[student]
    assert row["zoe"].endswith("| -") and row["kim"].endswith("| 0 / 20")   # no verdict is no zero
    assert browser.errors() == []


def test_long_messages_wrap_at_1024_px(graded, browser):
    _, page = graded
    browser.open(page)
    browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true); 0")
    longest = browser.evaluate(
        "Math.max(...Array.from(document.querySelectorAll('.message')).map(m => m.textContent.length))")
    assert longest > 150                                           # the unbroken word is on the page, shown
    width = browser.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert width[1] == 1024 and width[0] <= width[1], width
    overflowing = browser.evaluate("""Array.from(document.querySelectorAll('td, th, li')).filter(
        e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.slice(0, 80))""")
    assert overflowing == []
    assert browser.errors() == []


def test_student_text_is_escaped(graded, browser):
    _, page = graded
    text = page.read_text()
    assert XSS not in text and SCRIPT not in text
    assert "&lt;img src=x onerror=document.body.dataset.pwned=1&gt;" in text
    assert "pwned=2" not in text             # an exception's own text never reaches a page (engine/channel.py)
    browser.open(page)
    browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true); 0")
    assert browser.evaluate("document.body.dataset.pwned") is None
    assert browser.evaluate("document.querySelectorAll('img:not(.heatmap)').length") == 0
    assert browser.evaluate("document.querySelectorAll('script').length") == 2      # the kit's own two
    cells = browser.evaluate(
        "Array.from(document.querySelectorAll('#students tbody td:first-child')).map(c => c.textContent)")
    assert XSS in cells                                            # shown as the text it is
    messages = browser.evaluate("Array.from(document.querySelectorAll('.message')).map(m => m.textContent)")
    assert any("raised ValueError" in m for m in messages) and not any("pwned" in m for m in messages)
    link = browser.evaluate(f"""Array.from(document.querySelectorAll('#students tbody tr')).find(
        r => r.cells[0].textContent === {XSS!r}).querySelector('a').getAttribute('href')""")
    assert link.startswith("../feedback/%3Cimg%20src%3Dx") and link.endswith("/causal_head/causal_head.html")
    assert browser.errors() == []


def _yticks(fig) -> list[float]:
    """The y tick values matplotlib draws inside the axes' view (as the PNG shows them)."""
    ax = fig.axes[0]
    fig.canvas.draw()
    low, high = ax.get_ylim()
    return [t for t in ax.get_yticks() if low <= t <= high]


def test_the_histogram_counts_whole_students():
    """The demo's class of five: no bar is taller than 2, where matplotlib's default locator ticks every 0.25."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from attnkit.class_report import score_histogram
    scores = [20.0, 0.0, 11.0, 16.0, 20.0]
    ticks = _yticks(score_histogram(scores, 20.0))
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    stock, ax = plt.subplots(figsize=(6, 3))                # the same bars with matplotlib's default ticks
    ax.hist(scores, bins=range(0, 22))
    assert not all(float(t).is_integer() for t in _yticks(stock))   # what the check above catches
    plt.close("all")


def _xticks(fig) -> list[float]:
    ax = fig.axes[0]
    fig.canvas.draw()
    low, high = ax.get_xlim()
    return [t for t in ax.get_xticks() if low <= t <= high]


def test_the_histogram_puts_each_bar_on_its_score_and_no_tick_past_the_maximum():
    """Full marks are the bar over the tick 20, and the axis ends there: no 21 on an assignment out of 20."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from attnkit.class_report import score_histogram
    scores = [20.0, 0.0, 11.0, 16.0, 20.0]
    fig = score_histogram(scores, 20.0)
    ticks = _xticks(fig)
    assert ticks and max(ticks) <= 20 and all(float(t).is_integer() for t in ticks), ticks
    tallest = max(fig.axes[0].patches, key=lambda bar: bar.get_height())
    assert tallest.get_height() == 2 and tallest.get_x() < 20 < tallest.get_x() + tallest.get_width()
    stock, ax = plt.subplots(figsize=(6, 3))                # the bars as they were: [k, k + 1)
    ax.hist(scores, bins=range(0, 22))
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    assert max(_xticks(stock)) > 20                         # what the check above catches
    plt.close("all")
