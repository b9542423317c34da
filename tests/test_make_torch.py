"""`make`'s venv: torch from PyTorch's CPU index (TORCH_INDEX_URL) before anything else, and then nothing the lock
does not pin.

This machine's pip finds a torch wheel without any index (PIP_FIND_LINKS and pip.conf's find-links name a local
wheel directory), and the CPU index cannot be reached from here: a test against the real address would pass without
touching it. So the Makefile's own torch step (`make torch VENV=dir`, the recipe `make venv` runs) is run against a
PEP 503 index served on 127.0.0.1 that offers the torch wheel found on this disk, with pip cut off from this
machine's configuration, and the server says what pip fetched.
"""
from __future__ import annotations

import functools
import http.server
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import urllib.parse
from pathlib import Path

import pytest

from tests import KIT_ROOT
from attnkit import doctor

PIN = next(line for line in (KIT_ROOT / "requirements.lock").read_text().splitlines() if line.startswith("torch=="))
VERSION = PIN.split("==")[1]
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def _local_torch_wheel() -> Path:
    """The CPU torch wheel at the pin for this Python, from this machine's local wheel directories."""
    dirs = [d for d in os.environ.get("PIP_FIND_LINKS", "").split() if d] + ["/opt/wheels"]
    for d in dirs:
        found = sorted(Path(d.removeprefix("file://")).glob(f"torch-{VERSION}+cpu-{TAG}-{TAG}-*linux*_x86_64.whl"))
        if found:
            return found[0]
    if os.environ.get("CI"):
        pytest.fail(f"no torch-{VERSION}+cpu wheel for {TAG} in {dirs}")
    pytest.skip(f"no torch-{VERSION}+cpu wheel for {TAG} on this disk (looked in {dirs})")


class _Index:
    """A PEP 503 simple index on 127.0.0.1 offering ``wheels``; ``fetched`` lists the paths pip asked for."""

    def __init__(self, root: Path, wheels: list[Path]):
        (root / "torch").mkdir(parents=True)
        links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in wheels)
        (root / "torch" / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        for w in wheels:
            (root / "torch" / w.name).symlink_to(w)
        self.fetched: list[str] = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                index.fetched.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    """This environment without anything that tells pip where else to look (PIP_FIND_LINKS, pip.conf, indexes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("VIRTUAL_ENV", "MAKEFLAGS")}
    return dict(env, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
                HOME=str(tmp_path))


def _make(*args, env, timeout=900):
    # the interpreter this test runs on (the wheel's tag), not whichever python3.X make would find first
    base = getattr(sys, "_base_executable", sys.executable)
    return subprocess.run(["make", "--no-print-directory", "-C", str(KIT_ROOT), f"PYTHON={base}", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_takes_torch_from_the_cpu_index_it_is_given(tmp_path):
    wheel = _local_torch_wheel()
    env = _isolated_env(tmp_path)
    index = _Index(tmp_path / "simple", [wheel])
    empty = _Index(tmp_path / "empty", [])
    try:
        # pip is cut off from the local wheels: an index without torch finds none (no silent fallback)
        p = _make("torch", f"VENV={tmp_path / 'venv-empty'}", f"TORCH_INDEX_URL={empty.url}", env=env)
        assert p.returncode != 0 and "No matching distribution found for " + PIN in p.stderr, p.stdout + p.stderr
        assert empty.fetched == ["/torch/"], empty.fetched

        venv = tmp_path / "venv"
        p = _make("torch", f"VENV={venv}", f"TORCH_INDEX_URL={index.url}", env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        fetched = [urllib.parse.unquote(f) for f in index.fetched]
        assert fetched == ["/torch/", f"/torch/{wheel.name}"], fetched            # the wheel came from there
        site = next((venv / "lib").glob("python3.*/site-packages"))
        installed = [d.name for d in site.glob("*.dist-info") if d.name.lower().startswith("torch-")]
        assert installed == [f"torch-{VERSION}+cpu.dist-info"], installed
        # --no-deps: nothing beside what `python -m venv` put there (pip; setuptools before 3.12)
        assert [d.name for d in site.glob("*.dist-info") if not d.name.startswith(("pip-", "setuptools-"))] == installed

        # and `make venv` runs that very step first, before the lock's pins
        p = _make("-n", "venv", f"VENV={tmp_path / 'fresh'}", f"TORCH_INDEX_URL={index.url}", env=env)
        lines = p.stdout.splitlines()
        torch_step = [i for i, line in enumerate(lines) if f"--index-url {index.url} '{PIN}'" in line]
        lock_step = [i for i, line in enumerate(lines) if "install -q -r requirements.lock" in line]
        assert p.returncode == 0 and len(torch_step) == 1 and lock_step and torch_step[0] < lock_step[0], p.stdout
    finally:
        index.close()
        empty.close()


def test_the_default_index_is_pytorchs_cpu_index(tmp_path):
    p = _make("-n", "torch", f"VENV={tmp_path / 'venv'}", env=_isolated_env(tmp_path))
    assert f"--no-deps --index-url https://download.pytorch.org/whl/cpu '{PIN}'" in p.stdout, p.stdout + p.stderr


def _fake_distribution(root: Path, name: str, version: str, requires: list[str] = ()) -> md.Distribution:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    return md.PathDistribution(info)


def test_the_venv_holds_the_pins_and_nothing_else(tmp_path):
    ok, text = doctor.check_pins()              # the venv running this test, as `make venv` built it
    assert ok, text
    assert "+cpu" in md.version("torch") or sys.platform != "linux", md.version("torch")
    # what PyPI's CUDA torch would have brought in is named
    site = sysconfig.get_paths()                 # the environment's packages (not setuptools' vendored ones on sys.path)
    real = [d for d in md.distributions(path=sorted({site["purelib"], site["platlib"]}))
            if d.metadata["Name"].lower() != "torch"]
    cuda_torch = _fake_distribution(tmp_path, "torch", VERSION, ['nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"'])
    ok, text = doctor.check_pins(real + [cuda_torch, _fake_distribution(tmp_path, "nvidia-cublas-cu12", "12.8.4.1"),
                                         _fake_distribution(tmp_path, "triton", "3.5.0")])
    assert not ok and "not pinned: nvidia-cublas-cu12 12.8.4.1, triton 3.5.0" in text, text
    assert f"torch {VERSION} is a CUDA build" in text, text
