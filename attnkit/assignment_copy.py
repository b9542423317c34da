"""`attnkit new NAME --from SOURCE`: a course's copy of an existing assignment, self-contained.

SOURCE is an assignment folder (``autograder/<A>`` of any course, a path) or the name of an assignment of the
kit's demonstration course, when the kit runs from its checkout. Its links become copies of what they point to:
the demonstration course's ``source/corpus.py`` links to ``../../../data/corpus.py``, which another course does
not have, and a link left dangling there broke `attnkit release` and `doctor`. The copy keeps the assignment's
name: its manifest, mistakes and corpus are written with it, so NAME must be SOURCE's.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from attnkit import KIT_SOURCE
from attnkit.engine import registry
from attnkit.scaffold import ScaffoldError, refusal

SKIP = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")


def source_folder(spec: str) -> Path:
    """The assignment folder ``spec`` names: a path to one, or an assignment of the kit's demonstration course."""
    path = Path(spec).expanduser()
    demo = KIT_SOURCE / registry.PACKAGE / spec
    for candidate in ([path] if path.is_dir() else []) + ([demo] if "/" not in spec else []):
        if (candidate / "manifest.toml").is_file():
            return candidate.resolve()
    none = "" if (KIT_SOURCE / registry.PACKAGE).is_dir() else " (an installed kit carries none)"
    raise ScaffoldError(f"--from {spec}: no assignment folder there (a folder with manifest.toml, such as "
                        f"another course's autograder/{path.name}), and the kit has no demonstration assignment of "
                        f"that name{none}")


def copy_assignment(name: str, spec: str, root: Path | None = None) -> list[Path]:
    """Copy the assignment ``spec`` into the course as autograder/NAME/ and the link source/NAME; return every
    path made, relative to ``root``."""
    root = registry.course() if root is None else Path(root)
    src = source_folder(spec)
    if src.name != name:
        raise ScaffoldError(f"--from {spec} copies the assignment {src.name!r}, whose files are written with its "
                            f"name: run `attnkit new {src.name} --from {spec}`")
    why = refusal(name, root)
    if why:
        raise ScaffoldError(why)
    final = root / registry.PACKAGE / name
    tmp = root / registry.PACKAGE / f".{name}.new"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(src, tmp, symlinks=False, ignore=SKIP)       # every link becomes a copy of its target
    except shutil.Error as e:
        shutil.rmtree(tmp, ignore_errors=True)
        broken = sorted({Path(s).relative_to(src).as_posix() for s, _, _ in e.args[0]})
        raise ScaffoldError(f"{src} has links that point nowhere ({', '.join(broken)}): copy it from a course "
                            f"where they resolve") from None
    tmp.rename(final)
    link = root / "source" / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(Path("..") / registry.PACKAGE / name / "source")       # where nbgrader looks
    made = sorted(p.relative_to(root) for p in final.rglob("*") if p.is_file())
    return made + [link.relative_to(root)]
