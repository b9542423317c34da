"""The student's way to the check service (issue 31), in a real browser: the released causal_head notebook open in
JupyterLab 4 (the venv's jupyter server on 127.0.0.1, with a token) in headless Chromium, against `attnkit serve`
standalone with a token from `attnkit tokens add`, set as a student sets it (~/.attnkit/check in their home).

The student types the answer into the solution cell and runs the check cell without saving: the cell saves the
notebook first, so the answer is what is checked. The unanswered notebook scores 0 and its failed checks are said in
words; past the burst the limit is said with when the next check is possible. Each test is its own student (its
own token, written in the home's check file before it runs), so none depends on another's order."""
import os
import shutil
import time

import pytest

from tests import KIT_ROOT
from tests.browser import Page
from tests.lab import Notebook, lab_server, saved_source
from tests.notebooks import solution_source
from tests.test_serve import Server, token_for

A = "causal_head"
RELEASE = KIT_ROOT / "release" / A
CHECK_CELL = f'check("{A}")'


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    state = tmp_path_factory.mktemp("check-service")
    s = Server(state, workers=1, queue=4, assignment=A).start()          # this course, causal_head alone
    yield s, state
    s.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, service):
    """(open(page, folder) -> Notebook, the student's home, the folder served): JupyterLab on a folder holding two
    copies of the release, `answered/` (the student types the answer), `unanswered/` and `limit/` (one a test: a
    notebook and its kernel are no other test's)."""
    top = tmp_path_factory.mktemp("lab")
    root, home = top / "work", top / "home"
    for folder in ("answered", "unanswered", "limit"):
        shutil.copytree(RELEASE, root / folder)
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATTNKIT_CHECK_URL", "ATTNKIT_CHECK_TOKEN", "ATTNKIT_CHECK_FILE", "JUPYTERHUB_API_TOKEN",
                        "VSCODE_PID")}
    env["HOME"] = str(home)
    token = os.urandom(16).hex()
    with lab_server(root, token, env) as base:
        yield (lambda page, folder: Notebook(page, f"{base}/lab/tree/{folder}/{A}.ipynb?token={token}")), home, root


@pytest.fixture
def page():
    """A browser of the test's own (a notebook left unsaved in another would hold its page with a dialog)."""
    with Page(width=1280, height=1000, timeout=120) as p:
        yield p


def as_student(lab, service, student: str) -> None:
    """The student's own token where the check cell looks for it: ~/.attnkit/check (address, then token)."""
    server, state = service
    (lab[1] / ".attnkit").mkdir(exist_ok=True)
    (lab[1] / ".attnkit" / "check").write_text(f"http://127.0.0.1:{server.port}\n{token_for(state, student)}\n")


def test_an_answer_typed_but_not_saved_is_saved_and_checked(lab, service, page):
    as_student(lab, service, "ada")
    nb = lab[0](page, "answered")
    on_disk = lab[2] / "answered" / f"{A}.ipynb"
    nb.type_into(nb.index("class Head(nn.Module)"), solution_source(A, "head"))
    assert "raise NotImplementedError()" in saved_source(on_disk, "head")          # typed, not saved
    started = time.time()
    shown = nb.run(nb.index(CHECK_CELL))
    assert len(shown["reports"]) == 1, shown
    assert "20 / 20" in shown["reports"][0], shown
    assert "Checks left now: 2." in shown["text"], shown
    assert not any("last saved version" in t for t in shown["text"]), shown
    assert os.stat(on_disk).st_mtime > started
    assert saved_source(on_disk, "head").strip() == solution_source(A, "head").strip()


def test_the_unanswered_release_scores_nothing_and_says_which_checks_failed(lab, service, page):
    as_student(lab, service, "ben")
    nb = lab[0](page, "unanswered")
    shown = nb.run(nb.index(CHECK_CELL))
    assert len(shown["reports"]) == 1, shown
    report = shown["reports"][0]
    assert "0 / 20" in report, report
    # the failed checks, in words: each names what it checks and why it failed (the answer's error)
    assert report.count("NotImplementedError") >= 3, report
    assert "Checks left now: 2." in shown["text"], shown


def test_past_the_burst_the_limit_is_said_with_when(lab, service, page):
    as_student(lab, service, "cy")
    nb = lab[0](page, "limit")
    cell = nb.index(CHECK_CELL)
    lefts = [nb.run(cell)["text"][-1] for _ in range(3)]
    assert lefts[:2] == ["Checks left now: 2.", "Checks left now: 1."], lefts
    assert lefts[2].startswith("Checks left now: 0 (the next in ") and lefts[2].endswith(" minutes)."), lefts
    shown = nb.run(cell)
    assert shown["reports"] == [], shown
    said = shown["text"][-1]
    assert said.startswith("You have used your checks of this assignment for now: try again in "), said
    assert int(said.split("try again in ")[1].split()[0]) >= 1
