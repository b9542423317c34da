"""Check your notebook against the course's hidden checks, from Jupyter: ``check(ASSIGNMENT)``, the
assignment's name as a string (the notebook's name without ``.ipynb``).

Saves the notebook, sends it to your course's check service (``attnkit serve``) and shows what it says: your
score, and as much about each check as your course shows before (and after) the deadline. JupyterLab and Jupyter
Notebook 7 save it when the cell runs; where a cell cannot ask for a save (VS Code, Colab, the classic Notebook),
the last saved version is checked and the cell says when it was saved.

On your course's JupyterHub there is nothing to set: the hub gives your server the address and says who you are.
In a Jupyter of your own, your instructor gives you the service's address and your own token: set them in the
environment (``ATTNKIT_CHECK_URL``, ``ATTNKIT_CHECK_TOKEN``), or write them, one a line (address, then token),
in the file ``~/.attnkit/check`` (in your home folder, never beside the notebook: what is beside it may be handed
in). Keep the token to yourself: checks made with it count as yours, and each student has a few an hour.

Python's standard library only: this file is all the check needs on your side.
"""
from __future__ import annotations

import html
import json
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.request

TIMEOUT = 300          # seconds to wait for an answer: a queue of classmates' checks, then the judging
SAVE_WAIT = 20         # seconds to wait for the front end to save the notebook (JupyterLab takes well under one)


class CheckRefused(Exception):
    """The check was not made; the message says why in one sentence."""


def _minutes(seconds) -> str:
    try:
        n = max(1, math.ceil(float(seconds) / 60))
    except (TypeError, ValueError):
        return "a few minutes"
    return f"{n} minute" + ("s" if n != 1 else "")


def _sentence(status: int, retry_after, body: dict) -> str:
    later = f"try again in {_minutes(retry_after)}"
    if status == 401:
        return ("The check service did not accept your token: check ATTNKIT_CHECK_TOKEN (or token=) against the "
                "one your instructor gave you (on JupyterHub: stop and start your server).")
    if status == 403:
        return "The check service does not count you among this course's students: ask your instructor."
    if status == 404:
        return ("The check service has no such assignment: check its name (the notebook's name without .ipynb) and "
                "the address.")
    if status == 413:
        return ("Your notebook is too large to check: clear its outputs (Kernel > Restart & Clear Output), save, "
                "and check again.")
    if status == 429:
        return f"You have used your checks of this assignment for now: {later}."
    if status == 503:
        return f"The check service is busy with other students' checks: {later}."
    said = body.get("error") if isinstance(body, dict) else None
    return f"The check service could not check your notebook (HTTP {status}" + (f": {said}" if said else "") + ")."


def _notebook_path(notebook, assignment: str) -> str:
    if notebook:
        return os.fspath(notebook)
    # the notebook this kernel runs for: Jupyter Server names it to the kernel (JPY_SESSION_NAME); the kernel's
    # folder is the notebook's
    session = os.path.basename(os.environ.get("JPY_SESSION_NAME", ""))
    for name in ([session] if session.endswith(".ipynb") else []) + [
            f"{assignment}.ipynb", os.path.join(assignment, f"{assignment}.ipynb")]:
        if os.path.isfile(name):
            return name
    raise CheckRefused(f"No notebook {assignment}.ipynb here: name it, e.g. check(\"{assignment}\", "
                       f"notebook=\"path/to/{assignment}.ipynb\").")


FILE = os.path.join("~", ".attnkit", "check")      # address, then token, one a line (ATTNKIT_CHECK_FILE: another)


def _from_file() -> list[str]:
    try:
        with open(os.path.expanduser(os.environ.get("ATTNKIT_CHECK_FILE") or FILE), encoding="utf-8") as f:
            return [line.strip() for line in f.read().splitlines() if line.strip()][:2]
    except (OSError, UnicodeDecodeError):
        return []


def settings(url=None, token=None) -> tuple[str, str]:
    """(address, token): the arguments, else the environment, else ~/.attnkit/check; on a JupyterHub, the token
    the hub gave this server (JUPYTERHUB_API_TOKEN). Empty strings for what is nowhere."""
    saved = _from_file()
    url = url or os.environ.get("ATTNKIT_CHECK_URL") or (saved[0] if saved else "")
    token = (token or os.environ.get("ATTNKIT_CHECK_TOKEN") or (saved[1] if len(saved) > 1 else "")
             or os.environ.get("JUPYTERHUB_API_TOKEN") or "")
    return url.rstrip("/"), token


def _configured(url, token) -> tuple[str, str]:
    url, token = settings(url, token)
    if not url:
        raise CheckRefused("No check service is set up here, so nothing was checked: your instructor's "
                           f"address goes in ATTNKIT_CHECK_URL or in {FILE} (on the course's JupyterHub it is set "
                           "for you).")
    if not token:
        raise CheckRefused(f"No token: set ATTNKIT_CHECK_TOKEN, or put it in {FILE} under the address, as your "
                           "instructor gave it to you.")
    return url, token


# ----------------------------------------------------------------------------------- saving from the cell

# Why a keystroke: JupyterLab 4 and Notebook 7 give a notebook's output no handle on the application (it is on
# `window` only when the server runs with expose_app_in_browser), and a scripted click on the save button does
# nothing there (jupyter/notebook#7225). A keydown of Ctrl-S (Cmd-S on a Mac) reaches the application's shortcuts,
# which save the notebook in front: the one whose cell is running (the keyup tells JupyterLab no text was typed,
# so it runs the shortcut at once). The front end runs this output only because
# the student's own run made it (outputs made in the session are trusted; a saved copy reopened is not, and runs
# nothing). Elsewhere it does nothing at all.
SAVE_SCRIPT = """(() => {
  const mac = /Mac|iPhone|iPad/.test(navigator.platform);
  const key = {key: 's', code: 'KeyS', ctrlKey: !mac, metaKey: mac, bubbles: true, cancelable: true};
  for (const kind of ['keydown', 'keyup']) {
    const event = new KeyboardEvent(kind, key);
    // the shortcuts read the legacy keyCode, which a made event cannot be given otherwise
    Object.defineProperty(event, 'keyCode', {get: () => 83});
    Object.defineProperty(event, 'which', {get: () => 83});
    document.body.dispatchEvent(event);
  }
})();"""


def _front_end():
    """IPython's ``display`` when the cell runs in a Jupyter kernel whose front end may run the script (None in a
    terminal, in plain Python, and where the kernel says it runs in VS Code or Colab, which run no such script)."""
    if "google.colab" in sys.modules or os.environ.get("VSCODE_PID"):
        return None
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    shell = get_ipython()
    return display if shell is not None and getattr(shell, "kernel", None) is not None else None


def _written_since(path: str, before: int) -> bool:
    """The file was written since its modification time was ``before`` (ns), and the write is over: Jupyter
    Server writes a notebook in place, keeping a copy of the old file (``.~NAME``) beside it until it is done."""
    try:
        now = os.stat(path).st_mtime_ns
        if now == before or os.path.exists(os.path.join(os.path.dirname(path) or ".", ".~" + os.path.basename(path))):
            return False
        with open(path, "rb") as f:
            json.loads(f.read().decode("utf-8"))
        return os.stat(path).st_mtime_ns == now
    except (OSError, ValueError):
        return False


def _ago(seconds: float) -> str:
    for unit, size, up_to in (("second", 1, 90), ("minute", 60, 120), ("hour", 3600, 48), ("day", 86400, None)):
        n = int(seconds // size)
        if up_to is None or n < up_to:
            return "just now" if seconds < 5 else f"{n} {unit}" + ("s" if n != 1 else "") + " ago"


def save(path: str, wait: float = SAVE_WAIT) -> str | None:
    """Ask the front end to save the notebook at ``path`` and wait until the file is written again: None then.
    Where it cannot be asked, or the file is not written within ``wait`` seconds, the sentence that says the last
    saved version is what will be checked, and when that was saved."""
    before = os.stat(path).st_mtime_ns
    display = _front_end()
    if display is None:
        why = "This notebook's front end cannot be asked to save it from a cell"
    else:
        handle = display({"application/javascript": SAVE_SCRIPT, "text/plain": ""}, raw=True, display_id=True)
        deadline = time.monotonic() + wait
        while not _written_since(path, before) and time.monotonic() < deadline:
            time.sleep(0.05)                 # the front end's save request: polled, it says nothing to the kernel
        # the script's output is left empty: a copy reopened trusted would otherwise save on opening
        handle.update({"text/plain": ""}, raw=True)
        if _written_since(path, before):
            return None
        why = f"The notebook was not saved within {wait:g} seconds of asking (this front end may not allow it)"
    saved = os.stat(path).st_mtime
    return (f"{why}, so its last saved version was checked, saved at "
            f"{time.strftime('%H:%M:%S', time.localtime(saved))} ({_ago(time.time() - saved)}): what you typed "
            "since is not in it (save with Ctrl-S and check again).")


# ----------------------------------------------------------------------------------- the check

def post(assignment: str, notebook=None, url=None, token=None) -> dict:
    """The service's answer (a dict) for the saved notebook, or CheckRefused with one sentence."""
    url, token = _configured(url, token)
    path = _notebook_path(notebook, assignment)
    with open(path, "rb") as f:
        body = f.read()
    request = urllib.request.Request(f"{url}/api/v1/check/{assignment}", data=body, method="POST",
                                     headers={"Authorization": f"token {token}",
                                              "Content-Type": "application/x-ipynb+json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        try:
            said = json.loads(e.read().decode("utf-8", "replace"))
        except (ValueError, OSError):
            said = {}
        raise CheckRefused(_sentence(e.code, e.headers.get("Retry-After"), said)) from None
    except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as e:
        # a 413 may come as a closed connection, the service having stopped reading what it refused
        if len(body) > 64 * 2**20:
            raise CheckRefused(_sentence(413, None, {})) from None
        raise CheckRefused(f"The check service at {url} cannot be reached ({getattr(e, 'reason', e)}): "
                           "are you online, and is the address right?") from None


def text(answer: dict) -> str:
    """The answer as plain text (outside Jupyter)."""
    lines = [f"{answer.get('assignment', '')}: {answer['score']:g} / {answer['max_score']:g}"]
    if answer.get("error"):
        lines.append(answer["error"])
    for c in answer.get("checks", []):
        mark = "pass" if c["passed"] else "FAIL"
        lines.append(f"  {mark} {c['id']} ({c['points']:g}/{c['max_points']:g})"
                     + (f": {c['message']}" if not c["passed"] and c.get("message") else ""))
    left = answer.get("checks_left")
    if left is not None:
        lines.append(f"checks left now: {left}" + (f" (the next in {_minutes(answer['retry_after'])})"
                                                   if not left and answer.get("retry_after") else ""))
    return "\n".join(lines)


def framed(answer: dict) -> str:
    """The service's page in a sandboxed frame of its own: whatever the answer holds (a service gone wrong, or
    another program on the service's port while it restarts), none of its script runs in Jupyter, none of its
    style restyles the notebook, none of its links leaves it. The report's own style and pictures show as they
    are; its one script only counts, for the kit's browser tests, the pictures that loaded."""
    checks = answer.get("checks")
    rows = len(checks) if isinstance(checks, list) else 0
    height = 14 + 2 * rows + (24 if answer.get("attention") else 0)          # em: the report's rows and pictures
    # in a <div>: IPython warns of an HTML output that is one bare <iframe>
    return (f'<div><iframe sandbox="" srcdoc="{html.escape(str(answer["feedback_html"]))}" '
            f'style="width:100%;height:{height}em;border:0"></iframe></div>')


def check(assignment: str, notebook=None, url=None, token=None):
    """Save the notebook of ``assignment`` (where the front end allows it), check it and show the report: in Jupyter as HTML (and return None, so
    the cell shows the report alone), elsewhere as text (and return the answer, a dict). When no check was made,
    one sentence saying why, and None."""
    if os.environ.get("NBGRADER_EXECUTION"):
        # nbgrader running the notebook (autograde, validate): a grader's run checks nothing, spends no check
        print("Not checked while nbgrader runs the notebook.")
        return None
    try:
        _configured(url, token)              # nothing set up: the sentence alone, no save asked for
        path = _notebook_path(notebook, assignment)
        stale = save(path)
        answer = post(assignment, path, url, token)
    except CheckRefused as e:
        print(e)                             # no check made: the one sentence why
        return None
    if stale:
        print(stale)                         # never a stale notebook checked silently
    try:
        from IPython.display import HTML, display
        from IPython import get_ipython
        if get_ipython() is None:
            raise ImportError
    except ImportError:
        print(text(answer))
        return answer
    left = answer.get("checks_left")
    note = "" if left is None else f"<p>Checks left now: {int(left)}" + (
        f" (the next in {html.escape(_minutes(answer['retry_after']))})" if not left and answer.get("retry_after")
        else "") + ".</p>"
    display(HTML(framed(answer) if answer.get("feedback_html") else f"<pre>{html.escape(text(answer))}</pre>"))
    if note:
        display(HTML(note))
    return None
