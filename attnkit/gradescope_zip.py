"""Build the autograder zip Gradescope expects for one assignment.

Gradescope unpacks the zip into /autograder/source, runs ``setup.sh`` once to build the image, and for
each submission runs ``run_autograder`` (see attnkit/gradescope_template/ and attnkit/gradescope.py).

The zip holds only what grading needs, picked by name (an allow-list, so gradebooks, submissions,
notebooks, corpora, caches and virtual environments can never slip in), and the course's grading key
(attnkit/engine/secret.py), so it is a secret: by default it is written beside the key, in the course's
gitignored ``.attnkit/`` (``default_path``), owner-only on disk and, inside the zip, the key's entry is owner-only
(0600) too. It is deterministic: fixed timestamps and modes, sorted entries, so the same kit always gives
the same bytes (with the same zlib).
What setup.sh installs is derived here from requirements.lock (requirements-grading.txt: the pins of what
grading imports and of their requirements), so the lock stays the one list of pins.
"""
from __future__ import annotations

import ast
import io
import re
import stat
import sys
try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: the same parser, as tomli (pinned for 3.10 in requirements.lock)
    import tomli as tomllib
import zipfile
from pathlib import Path

from attnkit import KIT_SOURCE
from attnkit.engine import registry
from attnkit.engine import secret

from attnkit.atomic import write_atomic
from importlib import metadata

TEMPLATES = Path(__file__).resolve().parent / "gradescope_template"
# the attnkit modules the container runs: the package, its entry point, and what they import
ENTRY = ("attnkit", "attnkit.gradescope")
# and whole, the layers grading runs on: some of their modules are imported only by the programs the judge starts
# (the grading child's, the notebook reader's: strings in sandbox.py and untrusted.py) or by a plug-in
LAYERS = ("engine", "isolation", "toolkit")
EXECUTABLE = ("setup.sh", "run_autograder")
EPOCH = (1980, 1, 1, 0, 0, 0)          # the earliest time a zip can record
KEY_ENTRY = ".attnkit/grading-key"     # the grading key, in the zip (attnkit/gradescope.py reads it there)


# What grading imports, found by reading attnkit/gradescope.py and the judge (autograder/) on the grading path:
# nbformat (reading the notebook), numpy (the wire format, the verdicts), torch (the reference; the child
# imports it to run the student's code) and matplotlib (the fork server imports it so a notebook's plotting
# imports cost nothing), tomli (attnkit/engine/config.py on 3.10). Their requirements come from their own
# metadata (requirements_closure), their pins from requirements.lock: no JupyterLab, nbgrader or pytest.
GRADING_DISTRIBUTIONS = ("torch", "numpy", "matplotlib", "nbformat", "tomli")
GRADING_REQUIREMENTS = "requirements-grading.txt"
SETUP_CONF = "setup.conf"


def python_bounds(root: Path = KIT_SOURCE) -> tuple[str, str]:
    """("3.10", "3.13"): pyproject's requires-python, the Pythons the lock supports, as setup.sh checks them.
    An installed kit has no lock of its own: its pins are this environment's (``lock_text``), wheels of this
    Python, so the bounds are this Python's minor version alone."""
    if not (root / "requirements.lock").is_file():
        return f"3.{sys.version_info[1]}", f"3.{sys.version_info[1] + 1}"
    spec = tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"]
    low, high = re.search(r">=\s*(3\.\d+)\s*,\s*<\s*(3\.\d+)", spec).groups()
    return low, high


def lock_text(root: Path = KIT_SOURCE) -> str:
    """The pins the zip carries: the kit's requirements.lock in a checkout; in an installed kit (no lock beside
    it: pip installs only the package), the exact versions of every distribution installed in the environment
    that runs this, which is the environment the course grades with."""
    lock = root / "requirements.lock"
    if lock.is_file():
        return lock.read_text()
    pins = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                   if d.metadata["Name"] and d.metadata["Name"].lower() != "attnkit"}, key=str.lower)
    return ("# written by `attnkit export --format gradescope` from the environment it ran in (an installed kit\n"
            f"# carries no lock): Python 3.{sys.version_info[1]}\n" + "\n".join(pins) + "\n")


def _lock_requirements(root: Path) -> list[tuple[str, str]]:
    """(canonical name, line) for every pin of the lock (``lock_text``), markers kept, comments dropped."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    lines = (l.split("#", 1)[0].strip() for l in lock_text(root).splitlines())
    return [(canonicalize_name(Requirement(l).name), l) for l in lines if l]


def _marker_environments(root: Path) -> list[dict]:
    """The marker environment of each supported minor Python on x86_64 Linux (3.11's as 3.11.0 and 3.11.5
    both, since the lock changes there), for a requirement that holds on any of them."""
    from packaging.markers import default_environment
    low, high = (int(v.split(".")[1]) for v in python_bounds(root))
    fulls = [f"3.{m}.0" for m in range(low, high)] + ["3.11.5"]
    return [dict(default_environment(), python_version=f.rsplit(".", 1)[0], python_full_version=f,
                 implementation_name="cpython", platform_python_implementation="CPython", sys_platform="linux",
                 platform_system="Linux", os_name="posix", platform_machine="x86_64", extra="") for f in fulls]


def requirements_closure(roots=GRADING_DISTRIBUTIONS, root: Path = KIT_SOURCE) -> set[str]:
    """Canonical names of ``roots`` and, transitively, what they require on any supported Python (extras
    not taken), read from the metadata of the distributions installed here (the kit's venv, built from
    the same lock). A requirement the lock does not pin is an error: the lock must stay complete."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    pinned = {name for name, _ in _lock_requirements(root)}
    envs = _marker_environments(root)
    found, todo = set(), [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        if name not in pinned and not (root / "requirements.lock").is_file() and not _installed(name):
            continue                                # an environment's pins: tomli is not installed on 3.11+
        if name not in pinned:
            raise ValueError(f"grading needs {name!r}, which requirements.lock does not pin")
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:      # pinned only for another Python (tomli on 3.11+): no metadata
            continue                                # here; setup.sh's resolver, the lock as constraints, adds
                                                    # what it needs there (as six for 3.10's python-dateutil)
        for line in requires:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append(canonicalize_name(req.name))
    return found


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def grading_requirements(root: Path = KIT_SOURCE) -> str:
    """The lines of requirements.lock grading needs (torch first, markers kept), as setup.sh installs them."""
    keep = requirements_closure(root=root)
    lines = [line for name, line in _lock_requirements(root) if name in keep]
    head = ("# Generated by `attnkit export --format gradescope` from requirements.lock: the pins of what grading\n"
            "# imports (attnkit/gradescope_zip.py GRADING_DISTRIBUTIONS) and their requirements, markers kept.\n")
    return head + "\n".join(lines) + "\n"


def attnkit_modules(root: Path = KIT_SOURCE) -> list[str]:
    """The files (relative to ``root``) of ENTRY and of every attnkit module they import, transitively, with
    the ``__init__.py`` of each package on the way (found by reading, not importing, them)."""
    def file_of(dotted: str) -> Path | None:
        base = root / Path(*dotted.split("."))
        return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)

    todo = [*ENTRY, *(".".join(p.relative_to(root).with_suffix("").parts) for layer in LAYERS
                      for p in sorted((root / "attnkit" / layer).glob("*.py")))]
    found = set()
    while todo:
        path = file_of(todo.pop())
        if path is None or path in found:
            continue
        found.add(path)
        rel = path.relative_to(root).with_suffix("")
        dotted = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
        todo += [".".join(package.split(".")[:i]) for i in range(1, package.count(".") + 2)]   # its packages
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
                if base.startswith("attnkit"):
                    todo += [base, *(f"{base}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("attnkit")]
    return sorted(p.relative_to(root).as_posix() for p in found)


def kit_files(assignment: str, course: Path | None = None) -> dict[str, bytes]:
    """Archive name -> content, for everything the zip holds: the kit's grading modules and this one
    assignment's plug-in from ``course`` (default: the current course)."""
    course = registry.course() if course is None else Path(course)
    files = {}
    folder = Path(registry.PACKAGE) / assignment
    # this one assignment's folder without its mutants (the kit's tests, not grading's): its manifest, its
    # judge's modules and the helpers released beside the notebook (a judge may hand one to the child, and
    # the judge must know their names); no data corpus
    judged = [*(p for p in (course / folder).glob("*.py") if p.name != "mutants.py"),
              *(p for p in (course / folder / "source").glob("*.py") if not p.name.endswith(".pct.py")),
              course / folder / "manifest.toml"]
    for p in sorted(judged):
        files[p.relative_to(course).as_posix()] = p.read_bytes()
    files.update({n: (KIT_SOURCE / n).read_bytes() for n in attnkit_modules(KIT_SOURCE)})
    if (KIT_SOURCE / "pyproject.toml").is_file():            # a checkout's; an installed kit has none beside it
        files["pyproject.toml"] = (KIT_SOURCE / "pyproject.toml").read_bytes()
    files["requirements.lock"] = lock_text(KIT_SOURCE).encode()
    # the same secret inputs as on the course's own machine, so both paths give the same verdicts
    files[KEY_ENTRY] = (secret.key_hex() + "\n").encode()
    files[GRADING_REQUIREMENTS] = grading_requirements(KIT_SOURCE).encode()
    low, high = python_bounds(KIT_SOURCE)
    fill = {"@ASSIGNMENT@": assignment, "@PYTHON_LOW@": low, "@PYTHON_BELOW@": high,
            "@PYTHON_LOW_MINOR@": low.split(".")[1], "@PYTHON_BELOW_MINOR@": high.split(".")[1]}
    for name in (*EXECUTABLE, SETUP_CONF):
        text = (TEMPLATES / name).read_text()
        for key, value in fill.items():
            text = text.replace(key, value)
        files[name] = text.encode()
    return files


def default_path(assignment: str) -> Path:
    """Where the zip goes without --output: beside the key it carries, in ``.attnkit/``, which the kit's
    .gitignore keeps out of git (the course root, where it went before, is not ignored: `git add .` took it)."""
    return secret.key_file().parent / f"attnkit-{assignment}-gradescope.zip"


def _mode(name: str) -> int:
    # the key readable by its owner alone once unzipped (Gradescope unzips as root); the scripts executable
    return 0o600 if name == KEY_ENTRY else 0o755 if name in EXECUTABLE else 0o644


def build_zip(assignment: str, out: Path, course: Path | None = None) -> Path:
    """Write the autograder zip for ``assignment`` to ``out`` (atomically, owner-only: it holds the grading
    key); return its path."""
    out = Path(out)
    buf = io.BytesIO()                          # a few MB: built in memory, then written in one atomic step
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in sorted(kit_files(assignment, course).items()):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.create_system = 3          # Unix, so unzip restores the modes below
            info.external_attr = (stat.S_IFREG | _mode(name)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    write_atomic(out, buf.getvalue(), mode=0o600)
    return out
