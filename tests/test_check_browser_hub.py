"""The student's way to the check service on the course's JupyterHub (issue 31), in a real browser: ada logs in
through the hub's login page in headless Chromium, her single-user JupyterLab runs (started by the hub), she types
her answer into the released notebook and runs the check cell. Nothing is typed to reach the service: the hub gave
her server the address and its token. The answer (checked after the cell saved the notebook) shows in the cell.

The hub is tests/hub.py's, the one tests/test_serve_hub.py runs; this module starts its own."""
import json
import shutil

import pytest

from tests import KIT_ROOT
from tests.browser import Page
from tests.hub import Hub
from tests.lab import SETTINGS, Notebook, poll, saved_source
from tests.notebooks import solution_source

A = "causal_head"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    # ada's home as the course leaves it: the release in a folder of its own; JupyterLab's user settings there
    # (every cell in the page: see tests/lab.py)
    home = tmp / "home" / "ada"
    shutil.copytree(KIT_ROOT / "release" / A, home / A)
    for name, values in SETTINGS.items():
        plugin, _, file = name.rpartition("/")
        folder = home / ".jupyter" / "lab" / "user-settings" / plugin
        folder.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps(values))
    h = Hub(tmp)
    yield h
    h.stop()


def test_a_student_logged_in_through_the_hub_checks_from_jupyterlab(hub):
    base = f"http://127.0.0.1:{hub.port}"
    with Page(width=1280, height=1000, timeout=120) as page:
        page.open_url(f"{base}/hub/login")
        page.evaluate("document.querySelector('#username_input').value = 'ada';"
                      "document.querySelector('#password_input').value = 'any'; 0")
        page.click("#login_submit")
        poll(lambda: page.evaluate("document.cookie !== null && location.pathname") not in (None, "/hub/login"),
             "the hub let ada in", 60)
        hub.start_server("ada")
        nb = Notebook(page, f"{base}/user/ada/lab/tree/{A}/{A}.ipynb")
        on_disk = hub.tmp / "home" / "ada" / A / f"{A}.ipynb"
        nb.type_into(nb.index("class Head(nn.Module)"), solution_source(A, "head"))
        assert "raise NotImplementedError()" in saved_source(on_disk, "head")      # typed, not saved
        shown = nb.run(nb.index(f'check("{A}")'))
    assert len(shown["reports"]) == 1, shown
    assert "20 / 20" in shown["reports"][0], shown
    assert "Checks left now: 2." in shown["text"], shown
    assert not any("last saved version" in t for t in shown["text"]), shown
