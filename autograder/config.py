"""Points, limits and the check <-> grade-cell map, read from grading_config/<assignment>.toml."""
from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: the same parser, as tomli (pinned for 3.10 in requirements.lock)
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path

from .sandbox import Limits

COURSE_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = COURSE_ROOT / "grading_config"


@dataclass(frozen=True)
class Check:
    id: str
    cell: str
    points: float
    title: str
    visible: bool


@dataclass(frozen=True)
class AssignmentConfig:
    assignment: str
    notebook: str
    checks: tuple[Check, ...]
    limits: Limits

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks)

    def by_cell(self) -> dict[str, Check]:
        return {c.cell: c for c in self.checks}


def assignments() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def load(assignment: str) -> AssignmentConfig:
    path = CONFIG_DIR / f"{assignment}.toml"
    if not path.is_file():
        raise KeyError(f"unknown assignment {assignment!r} (known: {', '.join(assignments())})")
    raw = tomllib.loads(path.read_text())
    checks = tuple(Check(id=c["id"], cell=c["cell"], points=float(c["points"]), title=c["title"],
                         visible=bool(c.get("visible", False))) for c in raw["checks"])
    return AssignmentConfig(raw["assignment"], raw["notebook"], checks, Limits(**raw.get("limits", {})))
