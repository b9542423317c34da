"""Points, limits and the check <-> grade-cell map, read from an assignment's manifest.toml."""
from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: the same parser, as tomli (pinned for 3.10 in requirements.lock)
    import tomli as tomllib
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

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


# What one check of the check service (attnkit serve) reveals, least to most: the visible tests only; and the
# pass/fail of every check; and the failed checks' sentences; and the diagnosis with the attention pictures.
TIERS = ("visible", "score", "checks", "diagnosis")
_PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class CheckService:
    """The manifest's optional [check_service]: what a check shows before and after ``deadline`` (an aware
    datetime; none: ``before`` always), and each student's token bucket: ``rate`` ("6/hour") refills it,
    ``burst`` checks fit in it."""
    before: str = "checks"
    after: str = "diagnosis"
    deadline: datetime | None = None
    rate: str = "6/hour"
    burst: int = 3

    def __post_init__(self):
        for name in ("before", "after"):
            if getattr(self, name) not in TIERS:
                raise ValueError(f"[check_service] {name} must be one of {', '.join(TIERS)}, "
                                 f"not {getattr(self, name)!r}")
        if self.deadline is not None and self.deadline.utcoffset() is None:
            raise ValueError("[check_service] deadline needs its time zone (e.g. 2027-01-15T23:59:00+01:00)")
        if not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"[check_service] burst must be a whole number of checks >= 1, not {self.burst!r}")
        self.per_second               # a bad rate is refused when the manifest is read, not at a student's check

    @property
    def per_second(self) -> float:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*/\s*(second|minute|hour|day)\s*", str(self.rate))
        if not found or float(found.group(1)) <= 0:
            raise ValueError(f"[check_service] rate reads like \"6/hour\" (per second, minute, hour or day), "
                             f"not {self.rate!r}")
        return float(found.group(1)) / _PERIODS[found.group(2)]

    def tier(self, now: datetime | None = None) -> str:
        now = now or datetime.now(timezone.utc)
        return self.after if self.deadline is not None and now >= self.deadline else self.before

    @classmethod
    def parse(cls, raw: dict) -> "CheckService":
        raw = dict(raw)
        unknown = set(raw) - {"before", "after", "deadline", "rate", "burst"}
        if unknown:
            raise ValueError(f"[check_service] has no setting {', '.join(sorted(unknown))}")
        deadline = raw.get("deadline")
        if isinstance(deadline, str):         # TOML's own datetime, or an ISO string
            try:
                raw["deadline"] = datetime.fromisoformat(deadline)
            except ValueError:
                raise ValueError(f"[check_service] deadline is not an ISO time: {deadline!r}") from None
        elif deadline is not None and not isinstance(deadline, datetime):
            raise ValueError(f"[check_service] deadline is not a time: {deadline!r}")
        return cls(**raw)


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
    check_service: CheckService = field(default_factory=CheckService)   # [check_service]: attnkit serve

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
                            raw.get("manual", {}), raw.get("data", {}), raw.get("demo", {}),
                            CheckService.parse(raw.get("check_service", {})))
