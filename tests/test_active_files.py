"""Files handed in beside the notebook never act in a TA's browser (red-team finding: an ``.html`` beside the
notebook, linked from its markdown, was copied into autograded/ and served by formgrader from the Jupyter origin
with no sandbox: one click by a logged-in TA and it read the ``_xsrf`` cookie, listed submitted/ and wrote through
the contents API).

One class graded by stock `nbgrader autograde` and `generate_feedback` (the kit's copy, attnkit/isolation/files.py,
under attnkit/nbgrader_ext/patch.py): ``mal`` hands in an honest, correct notebook whose markdown links to pages,
SVG, XHTML, XML, a script, odd and upper-case names, and passive files with hostile content. Every hostile file
carries ``PAYLOAD``, the attack itself: it reads the cookie, lists submitted/ and tries to write
``pwned-<name>.txt`` into the course through ``/api/contents``. A real Jupyter server with formgrader, a TA logged
in by token, and headless Chromium opening every page a TA opens and clicking every link. Asserted: no such file
is ever written, no script of the student's that ran could read the origin's cookie, and the honest notebook,
``helper.py`` and ``data.csv`` still grade, copy, link and open as before.

``test_the_attack_works_where_a_page_is_served_unsandboxed`` is the control: the same payload planted in
autograded/ (as a kit without the allowlist left it) does write through the contents API, so the checks above can
see an attack. Against the kit before the allowlist, ``test_formgrader_serves_nothing_active`` fails that way.
"""
import json
import urllib.request
from urllib.parse import quote

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell
from nbgrader.api import Gradebook

from attnkit.course import nbgrader
from attnkit.engine.judge import grade
from tests.browser import Page, formgrader_server
from tests.conftest import copy_course
from tests.fixture_course import CONTRACT_CELL, MAX_SCORE, NAME as A
from tests.fixture_course.fixtures import as_course, solution
from tests.notebooks import cell

STUDENT = "mal"
TOKEN = "ta-token-4f1c2a9e7b"


def payload(name: str) -> str:
    """The attack, as script: what the red team's page did with a TA's session. Its result is a promise the test
    awaits (so nothing is timed); ``wrote`` 201 means it wrote into the course."""
    return """window.__attempt = (async () => {
  const out = {name: %s};
  try { out.cookie = document.cookie; } catch (e) { out.cookie = 'denied: ' + e.name; }
  const xsrf = ((out.cookie.match(/_xsrf=([^;]+)/)) || [])[1] || '';
  try { out.listed = (await fetch('/api/contents/submitted', {credentials: 'include'})).status; }
  catch (e) { out.listed = 'blocked'; }
  try {
    out.wrote = (await fetch('/api/contents/pwned-' + out.name + '.txt', {method: 'PUT', credentials: 'include',
      headers: {'X-XSRFToken': xsrf, 'Content-Type': 'application/json'},
      body: JSON.stringify({type: 'file', format: 'text', content: 'written by the student'})})).status;
  } catch (e) { out.wrote = 'blocked'; }
  return out;
})();""" % json.dumps(name)


def html_page(name: str) -> str:
    return f"<!doctype html><html><body><h1>a page</h1><script>{payload(name)}</script></body></html>"


def cdata(name: str) -> str:
    return f"<![CDATA[{payload(name)}]]>"


# name handed in -> its content; LINKED are linked from the notebook's markdown (what a TA clicks)
HOSTILE = {
    "evil.html": html_page("evil_html"),
    "EVIL.HTML": html_page("upper_html"),
    "page.htm": html_page("htm"),
    ".hidden.html": html_page("hidden_html"),
    "sub/inner.html": html_page("inner_html"),
    "pic.svg": f'<svg xmlns="http://www.w3.org/2000/svg"><circle r="5"/><script>{cdata("svg")}</script></svg>',
    "doc.xhtml": f'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>x</p><script>{cdata("xhtml")}</script>'
                 "</body></html>",
    "data.xml": f'<?xml version="1.0"?><root><h:script xmlns:h="http://www.w3.org/1999/xhtml">{cdata("xml")}'
                "</h:script></root>",
    "evil.js": payload("js"),
    # not linked (a browser downloads or refuses them), refused all the same
    "a.html.": html_page("trailing_dot"),
    "noext": html_page("noext"),
    "page.mhtml": "MIME-Version: 1.0\r\nContent-Type: text/html\r\n\r\n" + html_page("mhtml"),
    "doc.pdf": "%PDF-1.4\n% not much of a PDF\n",
    "style.css": "body { display: none }\n",
}
LINKED = ["evil.html", "EVIL.HTML", "page.htm", ".hidden.html", "sub/inner.html", "pic.svg", "doc.xhtml", "data.xml",
          "evil.js", "evil%2Ehtml", f"..%2F..%2F..%2Fsubmitted%2F{STUDENT}%2F{A}%2Fevil.html"]
# allowed types with hostile content: copied, and shown as text or a (broken) image, never run
PASSIVE_HOSTILE = {"sniff.txt": html_page("sniff_txt"), "sniff.png": html_page("sniff_png")}
HONEST = {"helper.py": "HELPER = 1\n", "data.csv": "a,b\n1,2\n"}


def honest_notebook(course):
    """The release with a correct answer, and a markdown cell linking to every file handed in beside it."""
    nb = nbformat.read(course / "release" / A / f"{A}.ipynb", as_version=4)
    with as_course(course):
        cell(nb, CONTRACT_CELL).source = solution()
    links = [f"- [link:{name}]({name})" for name in LINKED + list(PASSIVE_HOSTILE) + list(HONEST)]
    nb.cells.append(new_markdown_cell("My files:\n\n" + "\n".join(links)))
    return nb


def hand_in(folder, files: dict) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, fixture_course_root):
    """The fixture course (tests/fixture_course/) after `nbgrader autograde` and `generate_feedback`; the judge's
    result for mal's notebook."""
    course = copy_course(fixture_course_root, tmp_path_factory.mktemp("active-files") / "course")
    folder = course / "submitted" / STUDENT / A
    folder.mkdir(parents=True)
    nbformat.write(honest_notebook(course), folder / f"{A}.ipynb")
    hand_in(folder, {**HOSTILE, **PASSIVE_HOSTILE, **HONEST})
    with as_course(course):
        fair = grade(folder / f"{A}.ipynb", A)
    nbgrader("autograde", A, cwd=course)
    nbgrader("generate_feedback", A, cwd=course)
    return course, fair


CONTROLS = {"pwned-control.txt", "pwned-traversal.txt"}     # what the tests that show an attack write


def pwned(course) -> list:
    """What the student's script wrote into the course through the contents API (the control's own excepted).
    Each browser test compares it before and after its own clicks, so each says what its own pages let through."""
    return sorted(p.name for p in course.rglob("pwned-*") if p.name not in CONTROLS)


@pytest.fixture(scope="module")
def server(graded):
    """formgrader on the graded course, a TA logged in: (base URL, mal's submission view, the browser tab)."""
    course, _ = graded
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission_notebook(A, A, STUDENT).id
    with formgrader_server(course, token=TOKEN) as base, Page(width=1024, height=768) as page:
        # what a browser downloads instead of showing is not rendered: refused, and said so (an event)
        page.send("Browser.setDownloadBehavior", {"behavior": "deny", "eventsEnabled": True})
        page.open_url(f"{base}/formgrader?token={TOKEN}")            # the login: a cookie for the origin
        yield base, f"{base}/formgrader/submissions/{submission}/", page


# What a page is once loaded: where it is, its type, and what the student's script did (null: none ran).
STATE = """(async () => ({url: location.href, type: document.contentType,
    text: (document.body || document.documentElement).textContent.slice(0, 300),
    attempt: window.__attempt ? await window.__attempt : null}))()"""


def opened(page, url: str, referrer: str | None = None) -> dict:
    page.open_url(url, referrer)
    return page.evaluate(STATE)


def links(page) -> list:
    """(text, resolved address or None) of every student link on the page (inert links have no address)."""
    return page.evaluate("""Array.from(document.querySelectorAll('a')).filter(a => a.textContent.startsWith('link:'))
        .map(a => [a.textContent, a.hasAttribute('href') ? a.href : null])""")


def click_every_link(page, url: str, referrer: str | None = None) -> dict:
    """Open ``url``, click its student link number i (for each i) as a user does, and say where that led:
    {link text: STATE after the click (``download``: the browser saved it rather than show it), or None when the
    link leads nowhere}. ``referrer``: the page ``url`` is opened from."""
    page.open_url(url, referrer)
    found = links(page)
    assert len(found) == len(LINKED) + len(PASSIVE_HOSTILE) + len(HONEST), found
    results = {}
    for i, (text, href) in enumerate(found):
        if i:
            page.open_url(url, referrer)
        selector = "a"
        index = page.evaluate(f"Array.from(document.querySelectorAll('a')).findIndex(a => a.textContent === "
                              f"{json.dumps(text)})")
        page._events.clear()
        page.click(selector, index)
        if href is None:                      # nothing to follow: the click leaves the page where it is
            assert page.evaluate("location.href") == url, text
            results[text] = None
            continue
        event, params = page.wait_for_any("Page.loadEventFired", "Browser.downloadWillBegin")
        results[text] = page.evaluate(STATE) if event == "Page.loadEventFired" else {
            "url": params.get("url"), "download": True, "attempt": None, "text": "", "type": None}
    return results


def with_rights(state) -> bool:
    """A script of the student's ran with the origin's rights: it read the session's cookie or wrote."""
    a = (state or {}).get("attempt")
    return bool(a) and ("_xsrf" in str(a.get("cookie")) or a.get("wrote") in (200, 201))


# ----------------------------------------------------------------------------------- what is copied

def test_only_passive_files_reach_autograded_and_feedback(graded):
    course, _ = graded
    for top in ("autograded", "feedback"):
        folder = course / top / STUDENT / A
        names = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
        assert not names & set(HOSTILE), (top, sorted(names & set(HOSTILE)))
        for name, text in {**HONEST, **PASSIVE_HOSTILE}.items():           # what is fine is still copied
            assert (folder / name).read_text() == text, (top, name)
    note = nbformat.read(course / "autograded" / STUDENT / A / f"{A}.ipynb", as_version=4).cells[0]
    assert note.metadata.get("attnkit_note"), note
    for name in HOSTILE:
        assert f"`{name}`" in note.source, name
    assert "not one of the accepted types" in note.source and ".py" in note.source
    feedback = (course / "feedback" / STUDENT / A / f"{A}.html").read_text()
    assert "not accepted" in feedback and "<code>evil.html</code>" in feedback and "<code>EVIL.HTML</code>" in feedback


def test_the_honest_notebook_grades_as_the_judge_grades_it(graded):
    course, fair = graded
    assert fair["score"] == MAX_SCORE, fair
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission(A, STUDENT)
        assert sub.code_score == fair["score"], (sub.code_score, fair["score"])


# ----------------------------------------------------------------------------------- in a TA's browser

def test_formgrader_serves_nothing_active(graded, server):
    """The submission view's links, clicked, and every hostile name opened under formgrader's files address."""
    course, _ = graded
    base, view, page = server
    before = pwned(course)
    clicked = click_every_link(page, view)
    direct = {name: opened(page, view + quote(name, safe="/%")) for name in HOSTILE if name not in ("a.html.", "noext",
                                                                                                   "page.mhtml",
                                                                                                   "doc.pdf")}
    acted = {k: v["attempt"] for k, v in {**clicked, **direct}.items() if with_rights(v)}
    assert acted == {} and pwned(course) == before, (acted, pwned(course))
    # the cleaned page: a link to a type the kit does not copy leads nowhere; the honest ones still open
    assert {t for t, state in clicked.items() if state is None} == {f"link:{n}" for n in LINKED}, clicked
    assert HONEST["helper.py"] in clicked["link:helper.py"]["text"], clicked["link:helper.py"]
    assert clicked["link:data.csv"].get("download") and clicked["link:data.csv"]["url"].endswith("/data.csv")
    assert clicked["link:sniff.txt"]["attempt"] is None and clicked["link:sniff.txt"]["type"] == "text/plain"
    assert clicked["link:sniff.png"]["attempt"] is None


def test_the_feedback_page_leads_nowhere_active(graded, server):
    """The feedback page as a TA opens it from the course's Jupyter server (``/files/``) and from disk: every link."""
    course, _ = graded
    base, _, page = server
    before = pwned(course)
    rel = f"feedback/{STUDENT}/{A}/{A}.html"
    served = click_every_link(page, f"{base}/files/{rel}", referrer=f"{base}/formgrader")
    on_disk = click_every_link(page, (course / rel).as_uri())
    acted = {k: v["attempt"] for k, v in {**served, **on_disk}.items() if with_rights(v)}
    assert acted == {} and pwned(course) == before, (acted, pwned(course))
    assert {t for t, s in on_disk.items() if s is None} == {f"link:{n}" for n in LINKED}, on_disk
    assert HONEST["helper.py"] in on_disk["link:helper.py"]["text"]


def test_jupyters_files_and_view_sandbox_what_they_serve(graded, server):
    """submitted/ keeps what was handed in (it is the student's), and a TA whose server root is the course reaches
    it through ``/files/`` and ``/view/``: jupyter_server serves both with ``sandbox allow-scripts`` (no
    ``allow-same-origin``), so the script runs in an origin of its own, with no cookie and no session."""
    course, _ = graded
    base, _, page = server
    before = pwned(course)
    ran = {}
    for name in ("evil.html", "EVIL.HTML", "pic.svg", "doc.xhtml", "data.xml"):
        path = f"submitted/{STUDENT}/{A}/{quote(name)}"
        req = urllib.request.Request(f"{base}/files/{path}", headers={"Authorization": f"token {TOKEN}",
                                                                       "Referer": f"{base}/formgrader"})
        with urllib.request.urlopen(req, timeout=30) as r:
            csp = r.headers["Content-Security-Policy"]
        assert "sandbox allow-scripts" in csp and "allow-same-origin" not in csp, (name, csp)
        ran[name] = opened(page, f"{base}/files/{path}", referrer=f"{base}/formgrader")
    page.open_url(f"{base}/view/submitted/{STUDENT}/{A}/evil.html")
    frame = page.evaluate("document.querySelector('iframe').getAttribute('sandbox')")
    assert frame == "allow-scripts", frame
    # the payloads do run there (so this can see them), but without the origin's rights
    assert all(state["attempt"] for state in ran.values()), ran
    assert not [n for n, state in ran.items() if with_rights(state)] and pwned(course) == before, ran
    assert all(state["attempt"]["cookie"].startswith("denied") for state in ran.values()), ran


def test_the_attack_works_where_a_page_is_served_unsandboxed(graded, server):
    """The control: the payload planted in autograded/ (as a kit without the allowlist copied it there) and opened
    through formgrader writes into the course. So the tests above would see the attack."""
    course, _ = graded
    _, view, page = server
    (course / "autograded" / STUDENT / A / "control.html").write_text(html_page("control"))
    try:
        state = opened(page, view + "control.html")
    finally:
        (course / "autograded" / STUDENT / A / "control.html").unlink()
    assert with_rights(state) and state["attempt"]["wrote"] == 201, state
    assert (course / "pwned-control.txt").exists()


def test_formgraders_files_address_still_reaches_all_of_the_course(graded, server):
    """What remains, as docs/security.md says: formgrader's files address joins the rest of its path to the
    student's autograded/ folder and checks only that the result lies in the course, so an address with ``..%2F``
    serves submitted/ (kept as handed in) from the origin without a sandbox. No cleaned page links there (the
    link's last name is read decoded); a TA must not open such an address from elsewhere. When nbgrader confines
    it to the folder, this fails: then update docs/security.md."""
    course, _ = graded
    _, view, page = server
    planted = course / "submitted" / STUDENT / A / "traversal.html"
    planted.write_text(html_page("traversal"))
    try:
        state = opened(page, view + f"..%2F..%2F..%2Fsubmitted%2F{STUDENT}%2F{A}%2Ftraversal.html")
    finally:
        planted.unlink()
    assert with_rights(state), state


# ----------------------------------------------------------------------------------- the rule alone
# (the kit's names imported inside each test, so the browser tests above also run, and fail, against an older kit)

@pytest.mark.parametrize("name", [*HOSTILE, "x.Htm", "x.py.html", "x.svgz", "x.csv.gz", "x.xht", "x.xsl", "x.shtml",
                                  "x.mht", "x.webp", "x.txt.", "x.p`y"])
def test_a_name_whose_type_a_browser_may_run_is_refused(name):
    from attnkit.isolation.files import passive_reason
    assert passive_reason(name.rsplit("/", 1)[-1]), name


def test_every_accepted_type_is_served_passively_on_this_machine():
    """The allowlist against this machine's MIME table (what tornado's StaticFileHandler types a file by)."""
    import mimetypes
    from attnkit.isolation.files import PASSIVE_SUFFIXES, passive_reason
    for suffix in PASSIVE_SUFFIXES:
        for name in (f"x{suffix}", f"X{suffix.upper()}", f"a.html{suffix}"):
            assert passive_reason(name) is None, (name, mimetypes.guess_type(name))


def test_the_copy_for_tas_takes_passive_files_and_the_kernels_copy_takes_all(tmp_path):
    from attnkit.isolation.files import copy_tree
    src = tmp_path / "src"
    src.mkdir()
    hand_in(src, {**HOSTILE, **PASSIVE_HOSTILE, **HONEST, "deep/er/w.npy": "x"})
    for_tas = copy_tree(src, tmp_path / "tas", passive_only=True)
    assert sorted(for_tas.copied) == sorted([*PASSIVE_HOSTILE, *HONEST, "deep/er/w.npy"])
    assert sorted(path for path, _ in for_tas.refused) == sorted(HOSTILE)
    assert "of the types .bin, .csv" in for_tas.note() and "`evil.html`: a `.html` file" in for_tas.note()
    kernel = copy_tree(src, tmp_path / "kernel")                  # no browser sees the kernel's scratch copy
    assert kernel.refused == [] and len(kernel.copied) == len(HOSTILE) + len(PASSIVE_HOSTILE) + len(HONEST) + 1


@pytest.mark.parametrize("href, kept", [
    ("evil.html", False), ("EVIL.HTML", False), ("evil%2Ehtml", False), ("sub/inner.html", False),
    (".hidden.html", False), ("a.html.", False), ("noext", False), ("sub/", False), ("pic.svg?x=1#y", False),
    ("..\\evil.html", False), ("..%2F..%2F..%2Fsubmitted%2Fmal%2F" + A + "%2Fevil.html", False),
    (" evil.ht\tml ", False), ("/formgrader/submissions/1/evil.html", False),
    ("helper.py", True), ("data.csv", True), ("other.ipynb", True), ("#heading", True), ("?q=1", True),
    ("https://example.org/page.html", True), ("mailto:ta@example.org", True),
    # the second red team: an address with a host that climbs out of autograded/ through formgrader's files address
    ("//localhost:8888/formgrader/submissions/..%2F..%2F..%2Fsubmitted%2Fbob%2F" + A + "%2Fevil.html", False),
    ("http://hub.example.org/user/ta/formgrader/submissions/x/..%2F..%2Fsubmitted%2Fevil.html", False),
    ("https://example.org/a/%2e%2e/b.html", False), ("https://example.org/formgrader/x.png", False)])
def test_a_relative_link_keeps_its_address_only_to_a_passive_type(href, kept):
    from attnkit.nbgrader_ext.inert import clean
    html = clean(f'<a href="{href}">the link</a>')
    assert ("href=" in html) == kept, html
    assert "the link" in html
