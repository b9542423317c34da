"""The supported Pythons: the lock installs on each, and every place that names them agrees.

pyproject.toml's requires-python is the one source of the bounds; ``attnkit doctor`` and the Makefile
read it. For each of SUPPORTED (the oldest, 3.10; Debian 12's own 3.11.2; 3.12), pip's resolver must find
a wheel (CPython, manylinux x86_64) for every pin of requirements.lock that applies there, and the pins
must satisfy one another's requirements there. Nothing is installed.

How, and why not simply ``pip install --dry-run --python-version X -r requirements.lock``:
- pip evaluates a requirements file's environment markers for the interpreter running it, never for
  ``--python-version``; so each Python's lines are chosen here with ``packaging`` (what pip uses) for
  that Python, and pip is given them marker-free.
- ``pip install`` before pip 24.2 checks a downloaded wheel's Requires-Python against the interpreter
  running pip (Debian 12's venv has pip 23.0.1: on 3.11.2 it refuses soupsieve 4.1.3 for 3.12);
  ``pip download --no-deps`` uses the target's, in every pip. It saves the wheels in a scratch folder.
- pip reads a copy of the package index's pages for the pinned versions alone (the same files, hashes,
  Requires-Python and yanked flags), so it weighs a few links per project, not tens of thousands.
- torch is looked up with ``pip index versions`` (which downloads nothing) and its requirements read from
  its wheel's metadata file: PyPI's torch wheel for Linux x86_64 is the 500 MB CUDA build, which the kit
  never installs (it takes the CPU build from a local wheel or the CPU index).

Skipped, with the reason, only when the package index cannot be reached. To see these tests fail on
another lock: ``ATTNKIT_LOCK=/path/to/requirements.lock pytest tests/test_environment.py``.
"""
from __future__ import annotations

import concurrent.futures
import email.parser
import html
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from tests import KIT_ROOT
from attnkit import doctor

LOCK = Path(os.environ.get("ATTNKIT_LOCK") or KIT_ROOT / "requirements.lock")
SUPPORTED = ("3.10", "3.11.2", "3.12")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "any")
INDEX = (os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")
# what the kit asks for; every other pin must be required by a pin for the Python at hand
ROOTS = {"torch", "nbgrader", "jupytext", "matplotlib", "pytest", "hypothesis", "django-static-mathjax",
         "jupyter-server-mathjax", "tqdm", "pytest-xdist", "nh3", "distributed", "jupyterhub"}
# requirements of PyPI's CUDA build of torch that its CPU build, the one the kit installs, does not have
CUDA_ONLY = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")
PIP_TIMEOUT = 240


def target_env(version: str) -> dict[str, str]:
    """The marker environment of CPython `version` on x86_64 Linux."""
    full = version if version.count(".") == 2 else version + ".0"
    env = default_environment()
    env.update(python_version=".".join(full.split(".")[:2]), python_full_version=full,
               implementation_name="cpython", implementation_version=full,
               platform_python_implementation="CPython", sys_platform="linux", platform_system="Linux",
               os_name="posix", platform_machine="x86_64")
    return env


def lock_lines(path: Path = LOCK) -> list[str]:
    return [l.split("#", 1)[0].strip() for l in path.read_text().splitlines() if l.split("#", 1)[0].strip()]


def pins_for(version: str, path: Path = LOCK) -> dict[str, Version]:
    """Canonical name -> pinned version, for the lines of the lock whose markers hold on `version`."""
    env, pins = target_env(version), {}
    for line in lock_lines(path):
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            (spec,) = req.specifier
            assert spec.operator == "==", line
            name = canonicalize_name(req.name)
            assert name not in pins, f"{req.name} is pinned twice for Python {version}"
            pins[name] = Version(spec.version)
    return pins


# ------------------------------------------------------------------------------ the index, once

def _get(url: str, accept: str | None = None, timeout: float = 30) -> bytes:
    cafile = os.environ.get("PIP_CERT")
    ctx = ssl.create_default_context(cafile=cafile if cafile and os.path.exists(cafile) else None)
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
        return r.read()


def _project(name: str) -> dict:
    return json.loads(_get(f"{INDEX}/{name}/", "application/vnd.pypi.simple.v1+json"))


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A PEP 503 copy of the index's pages for the wheels of every version pinned for any Python."""
    try:
        _get(f"{INDEX}/pip/", "application/vnd.pypi.simple.v1+json", timeout=15)
    except (urllib.error.URLError, OSError) as e:
        pytest.skip(f"the package index {INDEX} is unreachable ({e}): cannot resolve the lock")
    wanted: dict[str, set[Version]] = {}
    for version in SUPPORTED:
        for name, v in pins_for(version).items():
            wanted.setdefault(name, set()).add(v)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        pages = dict(zip(wanted, pool.map(_project, wanted)))
    root = tmp_path_factory.mktemp("index")
    files = {}
    for name, page in pages.items():
        links = []
        for f in page["files"]:
            if not f["filename"].endswith(".whl"):
                continue
            try:
                _, v, _, _ = parse_wheel_filename(f["filename"])
            except (InvalidWheelFilename, InvalidVersion):      # an old release's legacy name
                continue
            if v not in wanted[name]:
                continue
            sha = f.get("hashes", {}).get("sha256")
            attrs = {"href": f["url"] + (f"#sha256={sha}" if sha else "")}
            if f.get("requires-python"):
                attrs["data-requires-python"] = f["requires-python"]
            if f.get("yanked"):
                attrs["data-yanked"] = f["yanked"] if isinstance(f["yanked"], str) else ""
            links.append("<a " + " ".join(f'{k}="{html.escape(str(a))}"' for k, a in attrs.items()) + f'>{f["filename"]}</a>')
            files.setdefault(name, []).append(f)
        (root / name).mkdir()
        (root / name / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return root, files


def _pip(*args: str) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", *args]
    cert = os.environ.get("PIP_CERT")
    return cmd + (["--cert", cert] if cert and os.path.exists(cert) else [])


def _target(version: str) -> list[str]:
    return ["--only-binary=:all:", "--python-version", version, "--implementation", "cp",
            *[a for p in PLATFORMS for a in ("--platform", p)]]


@pytest.fixture(scope="module")
def resolutions(index, tmp_path_factory):
    """Python version -> (pins, pip's exit code, its output, {name: (version, Requires-Dist)} of the wheels
    pip chose, the torch versions pip lists).

    ``pip download --no-deps`` resolves each Python's pins (``pip install --dry-run`` before pip 24.2 checks
    a wheel's Requires-Python against the interpreter running pip, not ``--python-version``). The newest
    Python goes first; the others then run at once, each given its wheels as already downloaded (pip
    checks their hashes, and says which files it took), so most wheels cross the network once."""
    root, _ = index
    work = tmp_path_factory.mktemp("resolve")
    torch = {v: subprocess.Popen(_pip("index", "versions", "torch", *_target(v), "--index-url", root.as_uri()),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
             for v in SUPPORTED}

    def start(version: str, seed: Path | None = None):
        reqs = work / f"requirements-{version}.txt"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins_for(version).items()) if n != "torch"))
        dest = work / f"wheels-{version}"
        dest.mkdir()
        for whl in seed.glob("*.whl") if seed else ():
            os.link(whl, dest / whl.name)
        return dest, subprocess.Popen(
            _pip("download", "--no-deps", *_target(version), "--dest", str(dest), "--index-url", root.as_uri(),
                 "--progress-bar", "off", "-r", str(reqs)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)

    first, *rest = sorted(SUPPORTED, key=lambda v: Version(v), reverse=True)
    runs = {first: start(first)}
    runs[first][1].wait(timeout=PIP_TIMEOUT)
    runs.update({v: start(v, seed=runs[first][0]) for v in rest})
    out = {}
    for version in SUPPORTED:
        dest, proc = runs[version]
        text = proc.communicate(timeout=PIP_TIMEOUT)[0]
        taken = re.findall(r"(?:Saved|File was already downloaded) (\S+\.whl)", text)
        m = re.search(r"Available versions: (.*)", torch[version].communicate(timeout=PIP_TIMEOUT)[0])
        out[version] = (pins_for(version), proc.returncode, text, _wheels([work / t for t in taken]),
                        [Version(v.strip()) for v in m.group(1).split(",")] if m else [])
    for dest, _ in runs.values():
        shutil.rmtree(dest, ignore_errors=True)
    return out


def _wheels(paths: list[Path]) -> dict[str, tuple[Version, list[str]]]:
    """name -> (version, Requires-Dist) of each wheel pip took."""
    found = {}
    for whl in paths:
        name, version, _, _ = parse_wheel_filename(whl.name)
        with zipfile.ZipFile(whl) as zf:
            meta = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
            parsed = email.parser.Parser().parsestr(zf.read(meta).decode())
        assert name not in found, f"pip took two wheels of {name}"
        found[name] = (version, parsed.get_all("Requires-Dist") or [])
    return found


@pytest.mark.parametrize("version", SUPPORTED)
def test_lock_resolves_with_pips_resolver(resolutions, version):
    pins, code, text, wheels, torch_versions = resolutions[version]
    assert code == 0, f"pip cannot install the lock on Python {version}:\n" + "\n".join(
        l for l in text.splitlines() if "ERROR" in l or "Requires-Python" in l)[-3000:]
    found = {name: v for name, (v, _) in wheels.items()}
    expected = {n: v for n, v in pins.items() if n != "torch"}
    assert found == expected, {n: (expected.get(n), found.get(n)) for n in expected.keys() | found.keys()
                               if expected.get(n) != found.get(n)}
    assert pins["torch"] in torch_versions, \
        f"no torch {pins['torch']} wheel for CPython {version} on manylinux x86_64 (the index has {torch_versions[:6]})"


def _torch_requirements(index, version: str, want: Version) -> list[str]:
    """torch's Requires-Dist, from the metadata file of its wheel for `version`, less the CUDA build's own."""
    _, files = index
    tag = "cp" + "".join(version.split(".")[:2])
    wheel = next(f for f in files["torch"]
                 if parse_wheel_filename(f["filename"])[1] == want and f"-{tag}-{tag}-" in f["filename"]
                 and "manylinux" in f["filename"] and "x86_64" in f["filename"])
    meta = email.parser.Parser().parsestr(_get(wheel["url"] + ".metadata").decode())
    return [r for r in meta.get_all("Requires-Dist") or [] if not CUDA_ONLY.match(canonicalize_name(Requirement(r).name))]


@pytest.mark.parametrize("version", SUPPORTED)
def test_lock_pins_satisfy_each_other(index, resolutions, version):
    """pip check, for a Python that need not be here: every requirement of every pin (with its markers and
    extras, for that Python) is met by a pin; and every pin is needed, by ROOTS or by another pin."""
    pins, code, _, wheels, _ = resolutions[version]
    if code != 0:
        pytest.fail(f"the lock does not resolve on Python {version} (see test_lock_resolves_with_pips_resolver)")
    requires = {name: reqs for name, (_, reqs) in wheels.items()}
    requires["torch"] = _torch_requirements(index, version, pins["torch"])
    env, extras, problems = target_env(version), {n: {""} for n in requires}, []
    changed = True
    while changed:                      # the extras pins ask of one another, to a fixed point
        changed = False
        for name, reqs in requires.items():
            for r in map(Requirement, reqs):
                dep = canonicalize_name(r.name)
                if r.extras and dep in extras and any(r.marker is None or r.marker.evaluate({**env, "extra": e})
                                                      for e in extras[name]) and not r.extras <= extras[dep]:
                    extras[dep] |= r.extras
                    changed = True
    needed = set()
    for name, reqs in requires.items():
        for r in map(Requirement, reqs):
            if r.marker is not None and not any(r.marker.evaluate({**env, "extra": e}) for e in extras[name]):
                continue
            dep = canonicalize_name(r.name)
            needed.add(dep)
            if dep not in pins:
                problems.append(f"{name} requires {r}, which the lock does not pin for Python {version}")
            elif not SpecifierSet(str(r.specifier)).contains(pins[dep], prereleases=True):
                problems.append(f"{name} requires {r}, but the lock pins {dep}=={pins[dep]}")
    stray = sorted(set(pins) - needed - ROOTS)
    assert not problems and not stray, problems + [f"{n} is pinned for Python {version} but nothing needs it"
                                                   for n in stray]


def test_lock_lines_are_exact_pins_with_valid_markers():
    env_names = {"python_version", "python_full_version"}
    for line in lock_lines():
        req = Requirement(line)                         # raises on a malformed line or marker
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!-]*(; .+)?", line), line
        if req.marker is not None:
            assert set(re.findall(r"[a-z_]+(?= *[<>=!])", str(req.marker))) <= env_names, \
                f"{line}: the lock's markers name only the Python version"
    assert [l for l in lock_lines() if l.startswith("torch==")] == ["torch==2.13.0"], \
        "setup.sh reads torch's pin as the line starting torch==, and the kit's results are made with 2.13.0"
    for version in SUPPORTED:
        assert pins_for(version).keys() >= ROOTS


# ------------------------------------------------------------------------------ the kit's declared ranges

@pytest.mark.parametrize("version", SUPPORTED)
def test_every_declared_dependency_range_holds_the_locks_pin(version):
    """`pip install attnkit` brings pyproject's ranges; `--constraint requirements.lock` must still resolve, so each
    range (its extras' too) admits the lock's pin on every supported Python, and the lock pins each one."""
    try:
        import tomllib
    except ModuleNotFoundError:             # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((KIT_ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert declared, "pyproject declares no run-time dependency: `pip install attnkit` would bring nothing"
    env, pins, problems = target_env(version), pins_for(version), []
    for line in declared:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(dict(env, extra="")):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{line}: the lock pins no {req.name} for Python {version}")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{line}: the lock pins {req.name}=={pin} for Python {version}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------ one set of bounds

def pyproject_bounds() -> tuple[tuple[int, int], tuple[int, int]]:
    text = (KIT_ROOT / "pyproject.toml").read_text()
    spec = re.search(r'^requires-python\s*=\s*"([^"]*)"', text, re.M).group(1)
    m = re.fullmatch(r">=\s*3\.(\d+)\s*,\s*<\s*3\.(\d+)", spec)
    assert m, f'requires-python must read ">=3.X,<3.Y" (the Makefile reads it so): {spec!r}'
    return (3, int(m.group(1))), (3, int(m.group(2)))


def test_pyproject_supports_3_10_to_3_12():
    assert pyproject_bounds() == ((3, 10), (3, 13))
    low, end = pyproject_bounds()
    assert all(low <= tuple(map(int, v.split(".")[:2])) < end for v in SUPPORTED)


def test_doctor_reads_the_same_bounds():
    assert doctor.python_bounds() == pyproject_bounds()
    low, end = pyproject_bounds()
    for minor in range(low[1] - 2, end[1] + 2):
        ok, text = doctor.check_python((3, minor, 1), "cpython")
        assert ok == (low <= (3, minor) < end), text
        assert f"3.{minor}.1" in text and ("supported" in text)
    assert not doctor.check_python((3, low[1], 0), "pypy")[0]
    ok, text = doctor.check_python()
    assert ok == (low <= sys.version_info[:2] < end) and sys.version.split()[0] in text


def _fake_pythons(d: Path, versions: dict[str, str | None]) -> None:
    """One script per candidate name: prints what the Makefile's probe prints, or fails like a pyenv shim."""
    d.mkdir(exist_ok=True)
    for name in ("python3.12", "python3.11", "python3.10", "python3.9", "python3.13", "python3"):
        v = versions.get(name)
        body = (f'echo cpython {" ".join(v.split(".")[:2])} {v}' if v else
                f'echo "pyenv: {name}: command not found" >&2; exit 127')
        (d / name).write_text(f"#!/bin/sh\n{body}\n")
        (d / name).chmod(0o755)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_makefile_takes_the_first_supported_python_or_says_which_it_accepts(tmp_path):
    for f in ("Makefile", "pyproject.toml"):
        shutil.copy(KIT_ROOT / f, tmp_path / f)
    fake = tmp_path / "bin"

    def make(versions, *args):
        _fake_pythons(fake, versions)
        return subprocess.run(["make", "-s", "-C", str(tmp_path), "python", *args], capture_output=True, text=True,
                              env={"PATH": f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(tmp_path)},
                              timeout=30)

    p = make({"python3.12": "3.12.3", "python3.11": "3.11.2", "python3": "3.11.2"})
    assert p.returncode == 0 and "python3.12 (3.12.3)" in p.stdout, p.stdout + p.stderr
    p = make({"python3.11": "3.11.2", "python3.10": "3.10.12"})            # python3.12: a shim that fails
    assert p.returncode == 0 and "python3.11 (3.11.2)" in p.stdout, p.stdout + p.stderr
    p = make({"python3.10": "3.10.12", "python3": "3.9.2"})
    assert p.returncode == 0 and "python3.10 (3.10.12)" in p.stdout, p.stdout + p.stderr
    p = make({"python3": "3.12.1", "python3.13": "3.13.0"})
    assert p.returncode == 0 and "python3 (3.12.1)" in p.stdout, p.stdout + p.stderr
    accepted = "CPython 3.10, 3.11, 3.12"
    p = make({"python3": "3.9.2", "python3.13": "3.13.0"})
    assert p.returncode != 0 and accepted in p.stderr and "python3.12 python3.11 python3.10 python3" in p.stderr, \
        p.stdout + p.stderr
    p = make({"python3.11": "3.11.2", "python3.9": "3.9.2"}, "PYTHON=python3.9")
    assert p.returncode != 0 and "PYTHON=python3.9 is not one" in p.stderr and accepted in p.stderr, p.stderr
    # the bounds come from pyproject.toml alone
    (tmp_path / "pyproject.toml").write_text(
        (KIT_ROOT / "pyproject.toml").read_text().replace('requires-python = ">=3.10,<3.13"',
                                                          'requires-python = ">=3.11,<3.12"'))
    p = make({"python3.12": "3.12.3", "python3.11": "3.11.2"})
    assert p.returncode == 0 and "python3.11 (3.11.2)" in p.stdout, p.stdout + p.stderr
    p = make({"python3.12": "3.12.3", "python3.10": "3.10.12"})
    assert p.returncode != 0 and "CPython 3.11 (" in p.stderr, p.stdout + p.stderr
