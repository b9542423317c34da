"""Which assignments the kit has: one folder each under ``assignments/``, known by its ``manifest.toml``.

Everything about one assignment lives in its folder (see README, "Where things live"); the rest of the kit
names none of them and asks here instead. A folder without a manifest is not an assignment.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS_DIR = KIT_ROOT / "assignments"


@dataclass(frozen=True)
class Assignment:
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

    def judge(self):
        """The judge's parts: make_plan, checks, evidence, attention_pattern, MISTAKES."""
        return importlib.import_module(f"assignments.{self.name}")

    def corpus(self):
        """Its corpus: SOLUTION_CELL, MISTAKES, VARIANTS, ALTERNATIVES, mutate(), alternative()."""
        return importlib.import_module(f"assignments.{self.name}.corpus")

    def helper_modules(self) -> frozenset:
        """The modules released beside the notebook (the notebook imports them; the grading child has none)."""
        return frozenset(p.name[:-3] for p in self.source.glob("*.py") if not p.name.endswith(".pct.py"))


def names() -> list[str]:
    return sorted(p.parent.name for p in ASSIGNMENTS_DIR.glob("*/manifest.toml"))


def get(name: str) -> Assignment:
    folder = ASSIGNMENTS_DIR / name
    if not isinstance(name, str) or "/" in name or not (folder / "manifest.toml").is_file():
        raise KeyError(f"unknown assignment {name!r} (known: {', '.join(names())})")
    return Assignment(name, folder)


def every() -> list[Assignment]:
    return [get(n) for n in names()]
