"""Render a page in real headless Chromium (Debian's package) and return the DOM after scripts ran."""
import os
import shutil
import subprocess
import tempfile

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
