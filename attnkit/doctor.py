"""`attnkit doctor`: what is missing, in plain words, and how to fix it."""
from __future__ import annotations

import importlib.metadata as md
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import attnkit
from attnkit import KIT_SOURCE
from attnkit.engine import registry
from attnkit.engine import config
from attnkit.engine import datasets
from attnkit.course import gradebook_knows
from attnkit.gradebook import locate
from attnkit.gradescope_zip import KEY_ENTRY
from attnkit.engine import secret


def check_kit():
    """Which kit runs, on which course (found as nbgrader finds it: --course-dir, else the current directory)."""
    return True, f"attnkit {attnkit.__version__} from {KIT_SOURCE}, on the course {registry.course()}"


def python_bounds(root: Path | None = None) -> tuple[tuple[int, int], tuple[int, int]]:
    """The Pythons the kit supports, [low, end), from requires-python (">=3.10,<3.13"): the installed kit's own
    metadata, which pyproject.toml's line becomes (the one place it is written; the Makefile reads the same
    line), or the pyproject.toml of the source tree ``root``."""
    if root is None:
        spec = md.metadata("attnkit")["Requires-Python"]
    else:
        text = (Path(root) / "pyproject.toml").read_text()
        spec = re.search(r'^requires-python\s*=\s*"([^"]*)"', text, re.M).group(1)
    spec = ",".join(sorted(spec.replace(" ", "").split(","), reverse=True))   # metadata writes "<3.13,>=3.10"
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)\s*,\s*<\s*(\d+)\.(\d+)", spec)
    if not m:
        raise ValueError(f'requires-python must read ">=X.Y,<X.Z", not {spec!r}')
    a, b, c, d = map(int, m.groups())
    return (a, b), (c, d)


def _pins() -> dict[str, str]:
    """Name -> version of every line of requirements.lock whose environment marker holds here."""
    from packaging.requirements import Requirement
    pins = {}
    for line in (KIT_SOURCE / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate():
            pins[req.name] = next(iter(req.specifier)).version
    return pins


def check_python(version_info=None, implementation=None):
    """Whether this Python (or the one given) is one the kit supports, and which those are."""
    v = tuple(version_info or sys.version_info)[:3]
    impl = implementation or sys.implementation.name
    (lo_major, lo_minor), (end_major, end_minor) = low, end = python_bounds()
    accepted = ", ".join(f"{lo_major}.{m}" for m in range(lo_minor, end_minor)) if lo_major == end_major else \
        f">={lo_major}.{lo_minor},<{end_major}.{end_minor}"
    ok = impl == "cpython" and low <= v[:2] < end
    name = {"cpython": "CPython"}.get(impl, impl)
    text = f"{name} {'.'.join(map(str, v))}"
    if ok:
        return True, f"{text}, supported (CPython {accepted}: pyproject.toml's requires-python)"
    return False, (f"{text} is not supported: the kit and requirements.lock are made for CPython {accepted} "
                   f"(pyproject.toml's requires-python); make a venv with one of them (`make venv` finds one on "
                   f"PATH, or `make venv PYTHON=/path/to/python3.X` after `rm -rf .venv`)")


# installed beside the pins, and rightly: the installer, and the kit itself (`pip install -e .`)
NOT_PINNED_BY_DESIGN = {"pip", "attnkit"}


def check_pins(distributions=None):
    """Every pin installed at its version, nothing installed that the lock does not pin (PyPI's CUDA torch
    brings nvidia-* and triton), and torch the CPU build. ``distributions``: importlib.metadata's, by default
    this Python's."""
    from packaging.utils import canonicalize_name as canon
    if distributions is None:
        # what the environment has installed: its site-packages, not whatever sys.path holds now (importing
        # setuptools puts its own vendored packaging, jaraco, ... on it)
        import sysconfig
        paths = sysconfig.get_paths()
        distributions = md.distributions(path=sorted({paths["purelib"], paths["platlib"]}))
    dists = list(distributions)
    have = {canon(d.metadata["Name"]): d.version for d in dists}
    pins = {canon(name): want for name, want in _pins().items()}
    wrong = []
    for name, want in pins.items():
        if name not in have:
            wrong.append(f"{name} missing")
        elif have[name].split("+")[0] != want.split("+")[0]:
            wrong.append(f"{name} {have[name]} (pinned {want})")
    extra = sorted(f"{n} {v}" for n, v in have.items() if n not in pins and n not in NOT_PINNED_BY_DESIGN)
    torch = next((d for d in dists if canon(d.metadata["Name"]) == "torch"), None)
    cuda = torch is not None and any(r.startswith("nvidia-") for r in torch.requires or [])
    if wrong or extra or cuda:
        return False, ("packages differ from requirements.lock: " + ", ".join(
            wrong[:8] + [f"not pinned: {', '.join(extra[:8])}"] * bool(extra)
            + [f"torch {have['torch']} is a CUDA build"] * cuda) + " - `rm -rf .venv` and run `make venv`")
    return True, f"{len(pins)} packages match requirements.lock, nothing else installed (torch {have['torch']})"


def in_source_tree() -> bool:
    """Whether the kit runs from its own repository checkout (the editable install): there, and only there,
    requirements.lock is beside it and the venv is held to its exact pins."""
    return (KIT_SOURCE / "requirements.lock").is_file() and (KIT_SOURCE / "pyproject.toml").is_file()


def check_requirements(distributions=None):
    """An installed kit (a wheel, a clone installed with pip): every requirement of its own metadata (pyproject's
    dependencies, the extras left out) installed at a version within its range, and torch not a CUDA build."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name as canon
    dists = list(md.distributions() if distributions is None else distributions)
    have = {canon(d.metadata["Name"]): d for d in dists}
    wanted = [r for r in map(Requirement, md.requires("attnkit") or [])
              if r.marker is None or r.marker.evaluate({"extra": ""})]
    wrong = []
    for req in wanted:
        dist = have.get(canon(req.name))
        if dist is None:
            wrong.append(f"{req.name} missing")
        elif not req.specifier.contains(dist.version.split("+")[0], prereleases=True):
            wrong.append(f"{req.name} {dist.version} (attnkit needs {req.specifier})")
    torch = have.get("torch")
    cuda = torch is not None and any(r.startswith("nvidia-") for r in torch.requires or [])
    if wrong or cuda:
        return False, ("packages do not meet attnkit's requirements: " + ", ".join(
            wrong[:8] + [f"torch {torch.version if torch else ''} is a CUDA build (install the CPU one first: "
                         "docs/instructors.md)"] * cuda) + " - reinstall attnkit with pip")
    return True, (f"{len(wanted)} requirements of attnkit {md.version('attnkit')} met "
                  f"(torch {torch.version if torch else '?'})")


def check_packages():
    """The exact pins of requirements.lock in the kit's own checkout; an installed kit's declared ranges elsewhere."""
    return check_pins() if in_source_tree() else check_requirements()


def check_alembic():
    found = shutil.which("alembic")
    return bool(found), (f"alembic on PATH ({found})" if found else
                         "alembic is not on PATH: nbgrader cannot create a gradebook; "
                         "activate the venv (source .venv/bin/activate) or use `make`")


def check_nbgrader_config():
    root = registry.course()
    cfg = root / "nbgrader_config.py"
    if not cfg.is_file():
        return False, "nbgrader_config.py missing at the course root"
    names = config.assignments()
    missing = [a for a in names if not (root / "source" / a / f"{a}.ipynb").is_file()]
    if missing:
        return False, f"autograder/ has {missing} but source/ has no notebook for them: run `attnkit release`"
    from attnkit.release import ReleaseProblem, refuse_dangling_links
    try:
        for a in names:
            refuse_dangling_links(a, root)
    except ReleaseProblem as e:
        return False, str(e)
    return True, f"nbgrader config loads grading_config/; autograder/ has: {', '.join(names) or 'no assignment yet'}"


def check_data(data_dir=None):
    """Every corpus an assignment needs (the manifests' [data]), found where every command looks and verified."""
    source, files = datasets.data_dir(data_dir), datasets.every_needed()
    problems = []
    for name, sha in files.items():
        try:
            datasets.verified(name, sha, source)
        except datasets.CorpusProblem as e:
            problems.append(str(e))
    if problems:
        return False, "; ".join(problems)
    return True, f"{', '.join(files) or 'no corpus needed'} in {source}: verified (SHA-256)"


def check_gradebook(course: Path | None = None):
    """Whether the course's gradebook, where its nbgrader configuration keeps it, knows every assignment the
    course has a source for (`nbgrader autograde` needs it to); a course with none yet needs no gradebook."""
    course = registry.course() if course is None else Path(course)
    where = locate(course)
    names = [a for a in config.assignments() if (Path(course) / "source" / a).is_dir()]
    if not where.exists():
        if not names:
            return True, f"no gradebook yet ({where}), and no assignment needs one: `attnkit release` makes it"
        return False, (f"{where} does not exist yet: `attnkit release` records the assignments "
                       f"({', '.join(names)}) in it")
    missing = [a for a in names if not gradebook_knows(where.url, where.course_id, a)]
    if missing:
        return False, (f"{where} lacks {', '.join(missing)}: `attnkit release` records the assignments "
                       f"(`attnkit autograde A` records a missing one)")
    return True, f"{where} knows {', '.join(names) or 'no assignment yet'}"


def _holds_key(course: Path, name: str) -> bool:
    """Whether the tracked file is the grading key or a zip that carries it (a Gradescope zip under any name),
    judged by what git holds (the file may be gone from the work tree and still be committed)."""
    if Path(name).name == "grading-key":
        return True
    if not name.lower().endswith(".zip"):
        return False
    blob = subprocess.run(["git", "-C", str(course), "show", f":./{name}"], capture_output=True, timeout=60).stdout
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            return KEY_ENTRY in zf.namelist()
    except zipfile.BadZipFile:
        return False


def check_key_not_tracked(course: Path | None = None):
    """Whether git tracks, in the course, the grading key or a Gradescope zip (which holds it): the next push
    would hand the judge's inputs to anyone who can read the repository."""
    course = registry.course() if course is None else Path(course)
    try:
        listed = subprocess.run(["git", "-C", str(course), "ls-files", "-z"], capture_output=True, timeout=60)
    except FileNotFoundError:
        return True, "git is not installed: nothing can be tracked"
    if listed.returncode != 0:
        return True, f"{course} is not in a git repository: git tracks nothing there"
    tracked = [n for n in listed.stdout.decode(errors="replace").split("\0") if n and _holds_key(course, n)]
    if tracked:
        return False, (f"git tracks {', '.join(tracked)}, which {'hold' if len(tracked) > 1 else 'holds'} the grading "
                       f"key: run `git rm --cached {' '.join(tracked)}` and commit, then rotate the key (it stays "
                       f"in the history): delete {_key_file()}, rebuild the Gradescope zip and upload it again")
    return True, "git tracks neither the grading key nor a Gradescope zip"


def _key_file() -> Path:
    return secret.key_file()


def run_doctor(data_dir=None, course: Path | None = None, log=print) -> int:
    course = registry.course() if course is None else Path(course)
    checks = [("kit", check_kit), ("python", check_python), ("packages", check_packages), ("alembic", check_alembic),
              ("nbgrader", check_nbgrader_config), ("gradebook", lambda: check_gradebook(course)),
              ("data", lambda: check_data(data_dir)),
              ("key", lambda: check_key_not_tracked(course))]
    failed = 0
    for name, fn in checks:
        try:
            ok, text = fn()
        except Exception as e:  # noqa: BLE001 - a doctor reports, it does not crash
            ok, text = False, f"{type(e).__name__}: {e}"
        failed += not ok
        log(f"{'ok ' if ok else 'FIX'}  {name:<9} {text}")
    log("all good" if not failed else f"{failed} problem(s) to fix")
    return 1 if failed else 0
