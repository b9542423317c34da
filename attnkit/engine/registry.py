"""Which assignments the course has: one folder each under the course's ``autograder/``, known by its
``manifest.toml``; and which course that is.

The course is found the way nbgrader finds it: the folder a command names (``--course-dir``, or nbgrader's
``CourseDirectory.root`` inside nbgrader's own commands), else the current directory; never the kit's own
location. Its ``autograder/`` folder is importable as the package ``autograder`` (one course per process),
so an assignment's plug-in is ``autograder.<name>`` whichever course it belongs to. Everything about one
assignment lives in its folder (docs/writing-an-assignment.md); the rest of the kit names none of them and
asks here instead. A folder without a manifest is not an assignment.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from attnkit.toolkit.plugin import Assignment

PACKAGE = "autograder"          # the course's hidden autograders, as Python sees them
_course: Path | None = None


class NotACourse(Exception):
    """The folder is not an attnkit course (no autograder/<assignment>/manifest.toml): one sentence."""


def use_course(root) -> Path:
    """Work on the course at ``root`` from now on (in this process); returns it, resolved."""
    global _course
    root = Path(root).resolve()
    folder = (root / PACKAGE).resolve()            # a scratch course may link to another course's autograders
    if not folder.is_dir():
        raise NotACourse(f"{root} is not an attnkit course: it has no {PACKAGE}/ folder (one folder per "
                         f"assignment, each with its manifest.toml); run the command in the course directory "
                         f"or name it with --course-dir")
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None:
        where = [str(Path(p).resolve()) for p in getattr(loaded, "__path__", [])]
        if where != [str(folder)]:
            raise NotACourse(f"this process already graded with the autograders of {', '.join(where) or '?'}; "
                             f"run the command again for the course {root}")
    else:
        spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        package = importlib.util.module_from_spec(spec)
        package.__path__ = [str(folder)]
        sys.modules[PACKAGE] = package
    _course = root
    return root


def course() -> Path:
    """The course this process works on (the current directory unless a command said otherwise)."""
    return _course if _course is not None else use_course(Path.cwd())


def autograders() -> Path:
    """The course's hidden autograders: one folder per assignment."""
    return course() / PACKAGE


@dataclass(frozen=True)
class AssignmentFolder:
    name: str
    folder: Path

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.toml"

    @property
    def source(self) -> Path:
        """The instructor's notebook and the helpers released beside it (``source/<A>`` points here)."""
        return self.folder / "source"

    @property
    def driver(self) -> Path:
        """The module the grading child runs the experiments with (its ``run_experiment``)."""
        return self.folder / "drive.py"

    def plugin(self) -> Assignment:
        """The assignment's plug-in (attnkit/toolkit/plugin.py): its package's ``ASSIGNMENT``, checked against
        the manifest (every [[checks]] id has its check), so a mismatch says so before any student is graded."""
        found = getattr(importlib.import_module(f"{PACKAGE}.{self.name}"), "ASSIGNMENT", None)
        if not isinstance(found, Assignment):
            raise TypeError(f"{self.folder}/__init__.py must set ASSIGNMENT to an instance of a subclass of "
                            f"attnkit.toolkit.plugin.Assignment (docs/writing-an-assignment.md)")
        from attnkit.engine import config
        missing = [c.id for c in config.parse(self.manifest).checks if c.id not in found.checks]
        if missing:
            raise TypeError(f"{self.folder}: manifest.toml lists checks its plug-in has not: {', '.join(missing)}")
        return found

    def mutants(self):
        """Its mutant submissions: SOLUTION_CELL, MUTANTS, VARIANTS, ALTERNATIVES, mutate(), alternative()."""
        return importlib.import_module(f"autograder.{self.name}.mutants")

    def helper_modules(self) -> frozenset:
        """The modules released beside the notebook (the notebook imports them; the grading child has none)."""
        return frozenset(p.name[:-3] for p in self.source.glob("*.py") if not p.name.endswith(".pct.py"))


def names() -> list[str]:
    return sorted(p.parent.name for p in autograders().glob("*/manifest.toml"))


def get(name: str) -> AssignmentFolder:
    if not isinstance(name, str) or "/" in name or not (autograders() / name / "manifest.toml").is_file():
        known = ", ".join(names()) or "none: it has no autograder/<assignment>/manifest.toml"
        raise KeyError(f"unknown assignment {name!r} in the course {course()} (known: {known})")
    folder = autograders() / name
    return AssignmentFolder(name, folder)


def every() -> list[AssignmentFolder]:
    return [get(n) for n in names()]
