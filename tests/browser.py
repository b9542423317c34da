"""Real headless Chromium (Debian's package) for the tests: the DOM after scripts ran, or a live page.

``render(path)`` returns the DOM as ``--dump-dom`` prints it. ``Page`` drives one tab over the DevTools
protocol on a pipe (``--remote-debugging-pipe``: no port, no extra package): open a file, evaluate
JavaScript, click an element with real mouse events, and read every console message, uncaught exception
and browser log entry the page produced.
"""
import contextlib
import fcntl
import json
import os
import select
import signal
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (make test installs it)")
        pytest.skip("chromium is not installed (make test installs it with apt where it can)")
    return found


def render(path, screenshot=None, size="1000,2400") -> str:
    with tempfile.TemporaryDirectory() as profile:
        args = [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
                "--virtual-time-budget=5000"]
        if screenshot:
            subprocess.run(args + [f"--screenshot={screenshot}", f"file://{path}"], capture_output=True, timeout=120)
        p = subprocess.run(args + ["--dump-dom", f"file://{path}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


class BrowserError(AssertionError):
    pass


class Page:
    """One tab of a headless Chromium of its own, ``width`` x ``height`` CSS pixels, driven over DevTools.

    ``console`` collects, in order, ``(kind, text)`` for every console call (``log``, ``warning``,
    ``error``, ...), uncaught exception (``exception``) and browser log entry (``log:error``, ...);
    once the Network domain is enabled (``go_offline()`` does), ``requests`` collects the URL of every request the
    page made."""

    def __init__(self, width: int = 1024, height: int = 768, timeout: float = 60.0):
        self.timeout, self.console, self._events, self._buf, self._id = timeout, [], [], b"", 0
        self.requests = []
        self._profile = tempfile.TemporaryDirectory()
        to_chrome, self._w = os.pipe()          # Chromium reads commands on its fd 3 ...
        self._r, from_chrome = os.pipe()        # ... and writes replies and events on its fd 4
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome, from_chrome)]
        os.close(to_chrome)
        os.close(from_chrome)

        def as_fds_3_and_4():                   # in the child, before exec: dup2 clears close-on-exec, and
            os.dup2(high[0], 3)                 # close_fds=False keeps them (everything else Python opened
            os.dup2(high[1], 4)                 # is close-on-exec already, PEP 446)

        args = [chromium(), *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}",
                "--remote-debugging-pipe", "--hide-scrollbars", "about:blank"]
        self._proc = subprocess.Popen(args, close_fds=False, preexec_fn=as_fds_3_and_4, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for fd in high:
            os.close(fd)
        try:
            target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable")
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------------- the protocol

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed its DevTools pipe (did it start? it needs no display)")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def _on_event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append((params.get("type", "log"), text))
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.console.append(("exception", d.get("exception", {}).get("description") or d.get("text", "")))
        elif method == "Log.entryAdded":
            e = params.get("entry", {})
            self.console.append((f"log:{e.get('level')}", f"{e.get('text')} {e.get('url', '')}".strip()))
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        self._events.append(message)

    def _call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._on_event(reply)

    def send(self, method: str, params: dict | None = None) -> dict:
        """A DevTools command to the page; its result."""
        return self._call(method, params, self._session)

    def wait_for(self, event: str) -> dict:
        """The next (or an already received, not yet awaited) event named ``event``."""
        deadline = time.monotonic() + self.timeout
        while True:
            for i, message in enumerate(self._events):
                if message.get("method") == event:
                    del self._events[: i + 1]
                    return message.get("params", {})
            self._events.clear()
            self._on_event(self._read_message(deadline))

    def wait_for_any(self, *events: str) -> tuple:
        """(name, params) of the next (or an already received, not yet awaited) event named one of ``events``."""
        deadline = time.monotonic() + self.timeout
        while True:
            for i, message in enumerate(self._events):
                if message.get("method") in events:
                    del self._events[: i + 1]
                    return message["method"], message.get("params", {})
            self._events.clear()
            self._on_event(self._read_message(deadline))

    # ----------------------------------------------------------------------------------- for a test

    def open(self, path) -> None:
        """Load a file and wait until its load event (images, scripts) has fired."""
        self.open_url(f"file://{os.path.abspath(path)}")

    def open_url(self, url: str, referrer: str | None = None) -> None:
        """Load a URL (a server of the test's own) and wait until its load event has fired; ``referrer``: as if
        followed from that page (Jupyter serves ``/files/`` only to a request from its own pages)."""
        self._events.clear()
        reply = self.send("Page.navigate", {"url": url, **({"referrer": referrer} if referrer else {})})
        if reply.get("errorText"):
            raise BrowserError(f"cannot open {url}: {reply['errorText']}")
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in reply:
            d = reply["exceptionDetails"]
            raise BrowserError(f"{expression[:80]}: {d.get('exception', {}).get('description') or d.get('text')}")
        return reply["result"].get("value")

    def click(self, selector: str, index: int = 0) -> None:
        """Click the ``index``-th element matching ``selector`` the way a user does: scrolled into view,
        a left mouse button pressed and released at its centre (so what is on top there gets the click)."""
        box = self.evaluate(f"""(() => {{
            const el = document.querySelectorAll({json.dumps(selector)})[{index}];
            if (!el) return null;
            el.scrollIntoView({{block: 'center', inline: 'center'}});
            const r = el.getBoundingClientRect();
            return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
        }})()""")
        if box is None:
            raise BrowserError(f"no element {selector!r} number {index}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box["x"], "y": box["y"], "button": "left",
                                                   "buttons": 0 if kind == "mouseReleased" else 1, "clickCount": 1})

    def go_offline(self) -> None:
        """Cut the page off the network, the way a machine without one is: every http(s) request fails at once
        (DevTools' offline emulation; file: and data: URLs still load), and each request's URL is recorded."""
        self.send("Network.enable")
        self.send("Network.emulateNetworkConditions",
                  {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})

    def errors(self) -> list:
        """What the page complained about: console errors and warnings, uncaught exceptions, log errors."""
        self.evaluate("0")                     # flush the events that arrived before this call
        return [(k, t) for k, t in self.console
                if k in ("error", "assert", "warning", "exception") or k in ("log:error", "log:warning")]

    def close(self) -> None:
        try:
            if self._proc.poll() is None:
                try:
                    self._call("Browser.close")
                except (BrowserError, OSError, ValueError):
                    pass
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:      # the browser and its helpers: the group started here
                    os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait()
        finally:
            for fd in (self._r, self._w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# Server extensions of this environment that formgrader does not need (they cost start-up time).
UNNEEDED = dict.fromkeys(["jupyterlab", "jupyter_lsp", "notebook", "notebook_shim", "jupyterlab_jupytext",
                          "jupyter_server_terminals", "nbgrader.server_extensions.validate_assignment"], False)


@contextlib.contextmanager
def jupyter_server(root, token: str, disabled: dict, env: dict, name: str, start_seconds: float, grace: float):
    """A Jupyter server of the test's own (127.0.0.1, a free port, ``token`` or none) serving ``root``, the server
    extensions in ``disabled`` off, started in ``env``; its runtime folder and log beside ``root``, named by
    ``name``: its base URL while the block runs, then it and its process group end (SIGKILL after ``grace`` s)."""
    from attnkit.course import BIN
    runtime = root.parent / f"{name}-runtime"                  # where the server says which port it took
    log_path = root.parent / f"{name}.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        [str(BIN / "jupyter"), "server", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1", "--port=0",
         f"--IdentityProvider.token={token}", "--ServerApp.password=", f"--ServerApp.jpserver_extensions={disabled!r}"],
        cwd=root, env=dict(env, JUPYTER_RUNTIME_DIR=str(runtime)), stdin=subprocess.DEVNULL,
        stdout=log, stderr=log, start_new_session=True)
    try:
        deadline, base = time.monotonic() + start_seconds, None
        while base is None:
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            info = runtime / f"jpserver-{server.pid}.json"
            try:
                url = json.loads(info.read_text())["url"].rstrip("/")
                urllib.request.urlopen(f"{url}/api/status?token={token}" if token else f"{url}/api", timeout=5).read()
                base = url
            except (OSError, ValueError, KeyError):
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def formgrader_server(course, token: str = ""):
    """A Jupyter server of the test's own (127.0.0.1, a free port, no token unless ``token``: then a TA logs in
    by opening an address with ``?token=``) on ``course``, with formgrader: its base URL while the block runs.
    It holds no kernel, so after a short grace (its graceful shutdown takes about 10 s) nothing is lost by
    ending it."""
    return jupyter_server(course, token, UNNEEDED, dict(os.environ), "jupyter-server", start_seconds=180, grace=2)


def line_png(figsize, dpi: int) -> str:
    """A matplotlib figure of one line, as base64 PNG: what a notebook's plot output holds."""
    import base64
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=figsize, dpi=dpi)
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()
