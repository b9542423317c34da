"""The release notebook's check cell, run as a student runs it: the release folder (as `attnkit release` wrote it,
attnkit_check.py beside the notebook) opened in JupyterLab in headless Chromium, its last cell run with
Shift+Enter against a running `attnkit serve`, the token in the environment as a student of a local Jupyter sets
it. The answer shows in the cell; the fourth check in a row is refused with the sentence for the limit."""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests import KIT_ROOT
from tests.browser import Page, chromium
from tests.test_serve import Server, token_for

RELEASE = KIT_ROOT / "release" / "causal_head"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    state = tmp_path_factory.mktemp("check-cell-state")
    s = Server(state).start()
    yield s, token_for(state, "ada")
    s.stop()


def _lab(folder, env, token):
    """JupyterLab on 127.0.0.1 (a free port) in ``folder``: (process, base URL)."""
    runtime = folder.parent / "lab-runtime"
    log = (folder.parent / "lab.log").open("w")
    proc = subprocess.Popen(
        [str(Env.BIN / "jupyter"), "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1", "--port=0",
         f"--IdentityProvider.token={token}", "--ServerApp.password="],
        cwd=folder, env=dict(env, JUPYTER_RUNTIME_DIR=str(runtime)), stdin=subprocess.DEVNULL, stdout=log,
        stderr=log, start_new_session=True)
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, (folder.parent / "lab.log").read_text()[-3000:]
        try:
            url = json.loads((runtime / f"jpserver-{proc.pid}.json").read_text())["url"].rstrip("/")
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5).read()
            return proc, url
        except (OSError, ValueError, KeyError):
            time.sleep(0.5)                       # polling the server's file and port


class Env:
    BIN = __import__("pathlib").Path(sys.executable).parent


def _until(page, expression, what, seconds=180):
    deadline = time.monotonic() + seconds
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.25)                          # polling the page


LAST_OUTPUT = ("(() => { const cells = document.querySelectorAll('.jp-Notebook .jp-Cell');"
               " const last = cells[cells.length - 1]; const out = last && last.querySelector('.jp-OutputArea');"
               " return out ? out.innerText : ''; })()")


def _run_last_cell(page):
    page.click(".jp-Notebook .jp-Cell:last-child .jp-InputPrompt")
    for kind in ("rawKeyDown", "keyUp"):
        page.send("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter",
                                             "windowsVirtualKeyCode": 13, "modifiers": 8})


def test_the_check_cell_shows_the_answer_then_the_limit(service, tmp_path):
    chromium()
    server, token = service
    folder = tmp_path / "causal_head"
    shutil.copytree(RELEASE, folder)
    assert (folder / "attnkit_check.py").is_file(), "attnkit release ships the client beside the notebook"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNKIT_CHECK", "JUPYTERHUB"))}
    env.update(ATTNKIT_CHECK_URL=f"http://127.0.0.1:{server.port}", ATTNKIT_CHECK_TOKEN=token,
               HOME=str(tmp_path))
    lab_token = secrets.token_hex(16)
    proc, base = _lab(folder, env, lab_token)
    try:
        with Page(1200, 900, timeout=180) as page:
            page.open_url(f"{base}/lab/tree/causal_head.ipynb?token={lab_token}")
            _until(page, "document.querySelectorAll('.jp-Notebook .jp-Cell').length > 10", "the notebook shows")
            _until(page, "!!document.querySelector('.jp-Notebook .jp-Cell:last-child .jp-InputPrompt')",
                   "the last cell shows")
            _until(page, "(document.querySelector('.jp-Notebook-ExecutionIndicator')||{}).title !== undefined "
                         "&& !!document.querySelector('.jp-Toolbar-kernelStatus, .jp-Notebook')", "the kernel")
            answers = []
            for n in range(4):
                before = page.evaluate(LAST_OUTPUT)
                _run_last_cell(page)
                answers.append(_until(page, f"(() => {{ const t = {LAST_OUTPUT}; "
                                            f"return t && t !== {json.dumps(before)} && /left|used|0 \\/ 20/.test(t)"
                                            f" ? t : ''; }})()", f"the answer of check {n + 1}"))
            page.send("Page.captureScreenshot", {"format": "png"})
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    first = answers[0]
    assert "0 / 20" in first and "Checks left now: 2" in first, first
    assert "Checks left now: 0" in answers[2] and "the next in" in answers[2], answers[2]
    assert "You have used your checks of this assignment for now: try again in" in answers[3], answers[3]
