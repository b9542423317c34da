"""Points, limits and the check <-> grade-cell map, read from an assignment's manifest.toml."""
from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: the same parser, as tomli (pinned for 3.10 in requirements.lock)
    import tomli as tomllib
from dataclasses import dataclass, field

from attnkit.engine import registry
from attnkit.isolation.sandbox import Limits


@dataclass(frozen=True)
class Check:
    id: str
    cell: str
    points: float
    title: str
    visible: bool


@dataclass(frozen=True)
class Contract:
    """What the student writes (the manifest's [contract]): the class or function ``name`` in the solution
    cell ``cell``, called as ``signature``; the driver reaches it only by that name (child_runtime.student_object)."""
    cell: str
    name: str
    kind: str          # "class" or "function"
    signature: str


@dataclass(frozen=True)
class AssignmentConfig:
    assignment: str
    notebook: str
    checks: tuple[Check, ...]
    limits: Limits
    contract: Contract
    manual: dict = field(default_factory=dict)   # [manual]: grade cell -> points of what a TA grades by hand
    data: dict = field(default_factory=dict)     # [data]: the corpus the released helper finds and verifies
    demo: dict = field(default_factory=dict)     # [demo]: the sample class `attnkit demo` grades

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks)

    def by_cell(self) -> dict[str, Check]:
        return {c.cell: c for c in self.checks}

    def points_by_cell(self) -> dict[str, float]:
        """Every grade cell of the notebook and its points: the checks' cells and the hand-graded ones."""
        return {**{c.cell: c.points for c in self.checks}, **{k: float(v) for k, v in self.manual.items()}}

    def refused(self, reason: str) -> dict:
        """The judge's result for a notebook that cannot be graded at all: 0, every check saying ``reason``.
        Here rather than in the judge so that a notebook refused before it is read costs no import of torch."""
        return {"assignment": self.assignment, "score": 0.0, "max_score": self.max_score, "error": reason,
                "checks": [{"id": c.id, "title": c.title, "passed": False, "points": 0.0, "max_points": c.points,
                            "message": reason, "diagnosis": None} for c in self.checks]}


def assignments() -> list[str]:
    return registry.names()


def load(assignment: str) -> AssignmentConfig:
    return parse(registry.get(assignment).manifest)


def parse(manifest) -> AssignmentConfig:
    """The assignment a manifest file describes (load() finds it by name)."""
    raw = tomllib.loads(manifest.read_text())
    checks = tuple(Check(id=c["id"], cell=c["cell"], points=float(c["points"]), title=c["title"],
                         visible=bool(c.get("visible", False))) for c in raw["checks"])
    contract = Contract(**raw["contract"])
    if contract.kind not in ("class", "function"):
        raise ValueError(f"{manifest}: [contract] kind must be \"class\" or \"function\", not {contract.kind!r}")
    return AssignmentConfig(raw["assignment"], raw["notebook"], checks, Limits(**raw.get("limits", {})), contract,
                            raw.get("manual", {}), raw.get("data", {}), raw.get("demo", {}))
