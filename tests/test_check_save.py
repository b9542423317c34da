"""The check cell saves the notebook before it is checked, or says that the last saved version was (issue 31):
attnkit_check.save and check() without a browser. A front end is stood in for by the ``display`` the client calls:
one that saves (writes the file, as Jupyter Server does: in place, its old copy beside it until done), one that
does nothing. tests/test_check_browser.py walks the same in JupyterLab."""
import json
import os
import re
import shutil
import threading

import pytest

from tests import KIT_ROOT
from attnkit.serve import attnkit_check

RELEASE = KIT_ROOT / "release" / "causal_head" / "causal_head.ipynb"
ANSWER = {"assignment": "causal_head", "score": 0, "max_score": 20, "checks": [], "checks_left": 2}


@pytest.fixture
def notebook(tmp_path, monkeypatch):
    path = tmp_path / "causal_head.ipynb"
    shutil.copy(RELEASE, path)
    os.utime(path, ns=(10**18, 10**18))           # saved long before this test
    monkeypatch.chdir(tmp_path)
    return path


class FrontEnd:
    """A ``display`` that, shown the save script, writes ``text`` to ``path`` as Jupyter Server does (or nothing
    when ``text`` is None); it records what it was shown."""

    def __init__(self, path, text):
        self.path, self.text, self.shown, self.updates = path, text, [], []

    def __call__(self, data, raw=False, display_id=None):
        self.shown.append(data)
        if self.text is not None:
            threading.Thread(target=self.write).start()
        front = self

        class Handle:
            def update(self, data, raw=False):
                front.updates.append(data)
        return Handle()

    def write(self):
        backup = self.path.parent / f".~{self.path.name}"
        shutil.copy(self.path, backup)
        with open(self.path, "w") as f:
            f.write(self.text[: len(self.text) // 2])        # half written: not yet the saved notebook
            f.flush()
            f.write(self.text[len(self.text) // 2:])
        backup.unlink()


def test_a_front_end_that_saves_is_waited_for(notebook, monkeypatch):
    edited = json.loads(notebook.read_text())
    edited["metadata"]["edited"] = True
    front = FrontEnd(notebook, json.dumps(edited))
    monkeypatch.setattr(attnkit_check, "_front_end", lambda: front)
    assert attnkit_check.save(str(notebook)) is None
    assert json.loads(notebook.read_text())["metadata"]["edited"] is True
    assert "KeyboardEvent" in front.shown[0]["application/javascript"]
    assert front.updates == [{"text/plain": ""}]                # the script is not left in the cell


def test_a_front_end_that_does_not_save_is_said(notebook, monkeypatch):
    front = FrontEnd(notebook, None)
    monkeypatch.setattr(attnkit_check, "_front_end", lambda: front)
    said = attnkit_check.save(str(notebook), wait=0.5)
    assert said.startswith("The notebook was not saved within 0.5 seconds of asking")
    assert "its last saved version was checked, saved at " in said and said.count(".") == 2   # one sentence


@pytest.mark.parametrize("where", ["no IPython kernel", "VS Code", "Colab"])
def test_where_a_cell_cannot_save_the_check_says_which_version_it_checked(notebook, monkeypatch, capsys, where):
    if where == "VS Code":
        monkeypatch.setenv("VSCODE_PID", "1")
    if where == "Colab":
        monkeypatch.setitem(__import__("sys").modules, "google.colab", object())
    monkeypatch.setenv("ATTNKIT_CHECK_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ATTNKIT_CHECK_TOKEN", "t")
    posted = []
    monkeypatch.setattr(attnkit_check, "post", lambda *a: posted.append(a) or dict(ANSWER))
    attnkit_check.check("causal_head")
    out = capsys.readouterr().out
    assert posted, out
    saved = re.search(r"its last saved version was checked, saved at (\d\d:\d\d:\d\d) \(([^)]*)\)", out)
    assert saved and saved.group(2).endswith("days ago"), out
    assert out.index("last saved version") < out.index("0 / 20")          # said before the answer


def test_nothing_set_up_asks_no_save(notebook, monkeypatch, capsys):
    """The release's own run (no service): the one sentence, no script in the cell's output."""
    monkeypatch.setenv("ATTNKIT_CHECK_FILE", os.devnull)
    for name in ("ATTNKIT_CHECK_URL", "ATTNKIT_CHECK_TOKEN", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    front = FrontEnd(notebook, None)
    monkeypatch.setattr(attnkit_check, "_front_end", lambda: front)
    attnkit_check.check("causal_head")
    assert capsys.readouterr().out.startswith("No check service is set up here")
    assert front.shown == []
