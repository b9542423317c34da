"""Build the autograder zip Gradescope expects for one assignment.

Gradescope unpacks the zip into /autograder/source, runs ``setup.sh`` once to build the image, and for
each submission runs ``run_autograder`` (see attnkit/gradescope_template/ and attnkit/gradescope.py).

The zip holds only what grading needs, picked by name (an allow-list, so gradebooks, submissions,
notebooks, corpora, caches and virtual environments can never slip in), and the course's grading key
(autograder/secret.py: keep the zip private, as the autograder itself). It is deterministic: fixed
timestamps and modes, sorted entries, so the same kit always gives the same bytes (with the same zlib).
"""
from __future__ import annotations

import ast
import os
import re
import stat
import tempfile
try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: the same parser, as tomli (pinned for 3.10 in requirements.lock)
    import tomli as tomllib
import zipfile
from pathlib import Path

from autograder import secret

from . import KIT_ROOT

TEMPLATES = Path(__file__).resolve().parent / "gradescope_template"
# the attnkit modules the container runs: the package, its entry point, and what they import
ENTRY = ("__init__.py", "gradescope.py")
# files outside the packages that an assignment's judge reads (autograder/attention_lm/plan.py loads the
# released helper wordlm.py to hand it to the child); no assignment's judge reads a data corpus
JUDGE_READS = {"attention_lm": ("source/attention_lm/wordlm.py",)}
EXECUTABLE = ("setup.sh", "run_autograder")
EPOCH = (1980, 1, 1, 0, 0, 0)          # the earliest time a zip can record


GRADESCOPE_PYTHON = "3.11"   # Ubuntu 22.04's python3.11 (3.11.0): the lock holds, and the kit's scores are proven on 3.11


def python_version(root: Path = KIT_ROOT) -> str:
    """The X.Y setup.sh installs: GRADESCOPE_PYTHON, which must lie within pyproject's requires-python."""
    spec = tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"]
    low, high = re.search(r">=\s*3\.(\d+)\s*,\s*<\s*3\.(\d+)", spec).groups()
    if not int(low) <= int(GRADESCOPE_PYTHON.split(".")[1]) < int(high):
        raise ValueError(f"Python {GRADESCOPE_PYTHON} for Gradescope is outside requires-python {spec!r}")
    return GRADESCOPE_PYTHON


def attnkit_modules(root: Path = KIT_ROOT) -> list[str]:
    """ENTRY and every attnkit module they import, transitively (found by reading, not importing, them)."""
    pkg, todo, found = root / "attnkit", list(ENTRY), set()
    while todo:
        name = todo.pop()
        if name in found or not (pkg / name).is_file():
            continue
        found.add(name)
        for node in ast.walk(ast.parse((pkg / name).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith("attnkit")):
                mod = (node.module or "").removeprefix("attnkit").lstrip(".")
                todo += [f"{mod}.py"] if mod else [f"{a.name}.py" for a in node.names]
            elif isinstance(node, ast.Import):
                todo += [f"{a.name.split('.')[1]}.py" for a in node.names if a.name.startswith("attnkit.")]
    return sorted(found)


def kit_files(assignment: str, root: Path = KIT_ROOT) -> dict[str, bytes]:
    """Archive name -> content, for everything the zip holds."""
    files = {}
    for p in sorted((root / "autograder").rglob("*.py")):
        rel = p.relative_to(root)
        if not any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            files[rel.as_posix()] = p.read_bytes()
    names = [f"attnkit/{m}" for m in attnkit_modules(root)] + [
        f"grading_config/{assignment}.toml", "pyproject.toml", "requirements.lock", *JUDGE_READS.get(assignment, ())]
    files.update({n: (root / n).read_bytes() for n in names})
    # the same fresh inputs as on the course's own machine, so both paths give the same verdicts
    files[".attnkit/grading-key"] = (secret.key_hex() + "\n").encode()
    fill = {"@ASSIGNMENT@": assignment, "@PYTHON@": python_version(root)}
    for name in EXECUTABLE:
        text = (TEMPLATES / name).read_text()
        for key, value in fill.items():
            text = text.replace(key, value)
        files[name] = text.encode()
    return files


def build_zip(assignment: str, out: Path, root: Path = KIT_ROOT) -> Path:
    """Write the autograder zip for ``assignment`` to ``out`` (atomically); return its path."""
    out = Path(out)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}-", suffix=".tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w") as zf:
            for name, data in sorted(kit_files(assignment, root).items()):
                info = zipfile.ZipInfo(name, date_time=EPOCH)
                info.create_system = 3          # Unix, so unzip restores the modes below
                info.external_attr = (stat.S_IFREG | (0o755 if name in EXECUTABLE else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data, compresslevel=9)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
