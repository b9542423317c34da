"""A student at a notebook in JupyterLab 4 (the venv's jupyter server), in real headless Chromium (tests/browser.py):
open it, edit a cell by typing, run a cell with Shift-Enter, and read what the cell shows once it has finished,
including the text the check service's report renders inside its sandboxed frame.

Everything waits on a condition of the page, polled, never on a fixed sleep."""
import json
import os
import time
from pathlib import Path

from tests.browser import BrowserError, Page, jupyter_server

# Server extensions a student's JupyterLab does not need for this (they cost start-up time).
UNNEEDED = dict.fromkeys(["jupyter_lsp", "jupyterlab_jupytext", "jupyter_server_terminals",
                          "nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.assignment_list",
                          "nbgrader.server_extensions.course_list", "nbgrader.server_extensions.validate_assignment"],
                         False)
# JupyterLab 4 renders only the cells in view (windowing); the test reads cells anywhere in the notebook, so it
# asks for every cell in the page, a user setting and nothing the check depends on.
SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
            "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                               "checkForUpdates": False}}


def poll(condition, what: str, seconds: float, every: float = 0.2):
    """``condition()``'s first truthy value, polled until ``seconds`` have passed (then an AssertionError)."""
    deadline = time.monotonic() + seconds
    while True:
        got = condition()
        if got:
            return got
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(every)                                      # polling a condition, not waiting for an event


def user_settings(folder: Path) -> Path:
    for name, values in SETTINGS.items():
        plugin, _, file = name.rpartition("/")
        (folder / plugin).mkdir(parents=True, exist_ok=True)
        (folder / plugin / file).write_text(json.dumps(values))
    return folder


def lab_server(root: Path, token: str, env: dict):
    """A Jupyter server with JupyterLab (127.0.0.1, a free port, ``token``) serving ``root``, its kernels started
    in ``env``: its base URL while the block runs. Its kernels are in its process group: they end with it."""
    settings = user_settings(root.parent / "lab-settings")
    return jupyter_server(root, token, UNNEEDED, dict(env, JUPYTERLAB_SETTINGS_DIR=str(settings)), "lab-server",
                          start_seconds=240, grace=15)


def saved_source(path: Path, grade_id: str) -> str:
    """The source of the nbgrader cell ``grade_id`` in the notebook file as saved."""
    nb = json.loads(path.read_text())
    return "".join(next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
                   ["source"])


CELLS_CSS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell"
CELLS = f"document.querySelectorAll('{CELLS_CSS}')"


class Notebook:
    """One notebook open in JupyterLab in ``page``."""

    def __init__(self, page: Page, url: str, seconds: float = 240):
        self.page, self.seconds = page, seconds
        # a workspace of its own: the server keeps the default one, and a later page would restore every notebook an
        # earlier test opened, then show one of them while this one is being read (CI: cell 42 gone for a moment)
        page.open_url(url.replace("/lab/tree/", f"/lab/workspaces/t{os.urandom(6).hex()}/tree/", 1))
        # the page shows the notebook, and its kernel is started, idle and connected to the page
        # (the server's own address, under a hub /user/NAME/; its token where the page was opened with one, else
        # the hub's cookie with the page's XSRF token, as JupyterLab's own requests carry it: a cookie alone is 403)
        poll(lambda: page.evaluate(f"""(async () => {{
                if (!{CELLS}.length) return false;
                const base = JSON.parse(document.getElementById('jupyter-config-data').textContent).baseUrl;
                const token = new URLSearchParams(location.search).get('token');
                const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1];
                const kernels = await (await fetch(base + 'api/kernels', {{headers: token
                    ? {{Authorization: 'token ' + token}} : {{'X-XSRFToken': decodeURIComponent(xsrf || '')}}}})).json();
                return Array.isArray(kernels) && kernels.some(k => k.execution_state === 'idle' && k.connections > 0);
            }})()"""),
             "the notebook is open and its kernel idle", seconds)

    def index(self, text: str) -> int:
        """The number of the first cell whose source holds ``text``."""
        # the editors are made after the notebook shows (lazily): polled
        return poll(lambda: (lambda i: i + 1 if i is not None and i >= 0 else None)(self.page.evaluate(
            f"Array.from({CELLS}).findIndex(c => (c.querySelector('.cm-content') || {{}}).textContent"
            f"?.includes({json.dumps(text)}))")), f"a cell holds {text!r}", 60) - 1

    def _editor(self, i: int) -> str:
        # the cells' container holds other elements too: the cell is found by its number among the cells
        self.page.evaluate(f"document.querySelectorAll('[data-test-editor]').forEach(e => "
                           f"e.removeAttribute('data-test-editor')); {CELLS}[{i}].querySelector('.cm-content')"
                           ".setAttribute('data-test-editor', ''); 0")
        return "[data-test-editor]"

    def type_into(self, i: int, source: str) -> None:
        """Replace cell ``i``'s source as a person does: click in it, select all, paste (without saving)."""
        self.page.click(self._editor(i))
        poll(lambda: self.page.evaluate(f"document.activeElement === document.querySelector("
                                        f"{json.dumps(self._editor(i))})"), "the editor has the focus", 30)
        # all of it selected, as a drag over it does (CodeMirror follows the document's selection)
        self.page.evaluate("document.getSelection().selectAllChildren(document.activeElement)")
        poll(lambda: self.page.evaluate(f"document.querySelector({json.dumps(self._editor(i))}).closest('.cm-editor')"
                                        ".querySelector('.cm-selectionBackground') !== null"), "the source is selected", 30)
        # pasted (CodeMirror reads the paste event's clipboard data): typing it key by key is slow, and DevTools'
        # insertText leaves the editor composing, where JupyterLab then ignores Shift-Enter
        self.page.evaluate(f"""(() => {{ const data = new DataTransfer(); data.setData('text/plain', {json.dumps(source)});
            document.activeElement.dispatchEvent(new ClipboardEvent('paste', {{clipboardData: data, bubbles: true,
                                                                               cancelable: true}})); }})()""")
        poll(lambda: self.page.evaluate(f"document.querySelector({json.dumps(self._editor(i))}).textContent"
                                        f".includes({json.dumps(source.splitlines()[-1].strip())})"),
             "the typed text is in the cell", 30)

    def key(self, key: str, ctrl: bool = False, shift: bool = False) -> None:
        code = {"Enter": ("Enter", 13, "\r"), "Escape": ("Escape", 27, "")}.get(key) or (
            f"Key{key.upper()}", ord(key.upper()), key)
        mods = (2 if ctrl else 0) | (8 if shift else 0)
        for kind in ("rawKeyDown", "keyUp"):
            self.page.send("Input.dispatchKeyEvent", {
                "type": kind, "modifiers": mods, "key": key, "code": code[0], "windowsVirtualKeyCode": code[1],
                **({"text": code[2]} if kind == "rawKeyDown" and key == "Enter" else {})})

    def run(self, i: int) -> dict:
        """Run cell ``i`` as a person does with the mouse: click in it, then Run > Run Selected Cell in the menu
        bar; once it has finished, what it shows (``outputs``). (A Shift-Enter pressed right after the click can
        be lost while JupyterLab makes the cell active, and nothing on the page says when it would not be.)"""
        prompt = f"{CELLS}[{i}].querySelector('.jp-InputArea-prompt').textContent"
        before = self.page.evaluate(prompt)
        self.page.click(self._editor(i))
        poll(lambda: self.page.evaluate(f"{CELLS}[{i}].classList.contains('jp-mod-active')"),
             f"cell {i} is active", 30)
        menu = self.page.evaluate("Array.from(document.querySelectorAll('.lm-MenuBar-item'))"
                                  ".findIndex(e => e.textContent.trim() === 'Run')")
        item = ".lm-Menu-item[data-command='notebook:run-cell']"
        for _ in range(6):
            self.page.click(".lm-MenuBar-item", menu)
            poll(lambda: self.page.evaluate(f"!!document.querySelector({json.dumps(item)})"), "the Run menu is open",
                 30)
            self.page.click(item)
            # the prompt turns to "[*]:" as soon as the run is asked for; a click that did not ask is redone, but
            # only once the page has had time to show it: a check service counts every run (CI once saw 'Checks
            # left now: 1.' after one run), and under load a click on a menu still being laid out closes the menu
            # without running anything (CI: a prompt still '[ ]:' minutes later)
            asked = lambda seconds: poll(lambda: self.page.evaluate(prompt) != before, "the run is asked for", seconds)
            try:
                asked(10)
                break
            except AssertionError:
                if self.page.evaluate(f"!!document.querySelector({json.dumps(item)})"):
                    self.key("Escape")          # the menu is still open: the click missed it
                    continue
            try:
                asked(30)
                break
            except AssertionError:
                pass
        # "[*]:" while it runs, then "[N]:" with a new N
        try:
            poll(lambda: (lambda p: p != before and "*" not in p and any(ch.isdigit() for ch in p))(
                self.page.evaluate(prompt)), f"cell {i} has run", self.seconds)
        except AssertionError as e:        # what the page showed instead: a dialog, the prompt (once seen in CI)
            seen = self.page.evaluate(f"[({prompt}), Array.from(document.querySelectorAll('.jp-Dialog'))"
                                      ".map(d => d.textContent.slice(0, 300))]")
            raise AssertionError(f"{e}; the prompt before {before!r}, now {seen[0]!r}; dialogs {seen[1]!r}") from e
        return self.outputs(i)

    def _frame_session(self, frame: str) -> str:
        """A DevTools session on the frame ``frame``: Chromium runs a sandboxed frame in a process of its own, a
        target of its own, attached here as DevTools attaches to a page's frames (auto-attach, flattened)."""
        page = self.page
        if not hasattr(page, "frame_sessions"):
            page.frame_sessions = {}
            page.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True})
        deadline = time.monotonic() + page.timeout
        while True:
            for message in page._events:
                params = message.get("params", {})
                if message.get("method") == "Target.attachedToTarget":
                    page.frame_sessions[params["targetInfo"]["targetId"]] = params["sessionId"]
            if frame in page.frame_sessions:
                return page.frame_sessions[frame]
            page._on_event(page._read_message(deadline))

    def outputs(self, i: int) -> dict:
        """Cell ``i``'s outputs as rendered: their text, and the text of each framed report (a sandboxed frame: read
        in the frame's own document, through DevTools)."""
        text = self.page.evaluate(f"Array.from({CELLS}[{i}].querySelectorAll('.jp-OutputArea-output'))"
                                  ".map(o => o.innerText.trim())")
        frames = self.page.evaluate(f"{CELLS}[{i}].querySelectorAll('.jp-OutputArea-output iframe').length")
        return {"text": [t for t in text if t], "reports": [self._frame_text(i, k) for k in range(frames)]}

    def _frame_text(self, i: int, k: int) -> str:
        found = self.page.send("Runtime.evaluate", {
            "expression": f"{CELLS}[{i}].querySelectorAll('.jp-OutputArea-output iframe')[{k}]"})
        frame = self.page.send("DOM.describeNode", {"objectId": found["result"]["objectId"]})["node"]["frameId"]

        session = self._frame_session(frame)

        def text():
            got = self.page._call("Runtime.evaluate", {
                "expression": "document.readyState === 'complete' && document.body ? document.body.innerText : ''",
                "returnByValue": True}, session)
            if "exceptionDetails" in got:
                raise BrowserError(str(got["exceptionDetails"]))
            return got["result"].get("value", "")
        return poll(text, "the report's frame has loaded", 60)
