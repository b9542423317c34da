"""`attnkit selfcheck`: the grader graded. Runs the kit's corpus of submissions against the current checks.

Mutation score = buggy submissions caught / all buggy ones, where a submission counts as caught only when it
loses exactly the checks its corpus entry lists (a check that also fails, or one that no longer does, means
the checks changed what they measure); diagnosed = caught and named as listed on every lost check;
false fails = correct variants that lost a point. Non-zero exit when either is not perfect, so an
instructor who edits a check sees at once what it now misses.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from attnkit.course import kit_corpus
from attnkit.engine import judge


def run_selfcheck(assignments, log=print, jobs: int | None = None) -> int:
    bad = 0
    for a in assignments:
        subs = kit_corpus().submissions(a)
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as ex:
            results = dict(zip(subs, ex.map(lambda nb: judge.grade(nb, a), subs.values())))
        buggy = {n: r for n, r in results.items() if n.startswith(("mistake:", "variant:"))}
        correct = {n: r for n, r in results.items() if n.startswith("alternative:") or n == "solution"}
        missed, undiagnosed, false_fails = verdicts(kit_corpus().module(a), results)
        caught = len(buggy) - len(missed)
        log(f"{a}: mutation score {caught}/{len(buggy)} caught ({100 * caught / max(1, len(buggy)):.0f}%), "
            f"{len(buggy) - len(missed) - len(undiagnosed)}/{len(buggy)} with their named diagnosis, "
            f"false fails {len(false_fails)}/{len(correct)} correct variants")
        for what, names in (("uncaught", missed), ("wrong or missing diagnosis", undiagnosed),
                            ("correct but lost points", false_fails)):
            for name in names:       # "uncaught": not losing exactly its listed checks
                log(f"  {what}: {name}")
        bad += len(missed) + len(undiagnosed) + len(false_fails)
    return 1 if bad else 0


def verdicts(corpus, results: dict) -> tuple[list, list, list]:
    """(not caught, caught without their named diagnosis, correct but lost points) of a graded corpus.

    Caught means losing exactly the checks the corpus entry lists: one more (a check now fails for a
    property the mutant keeps) or one fewer (a check no longer sees its property) is a change to look at."""
    variants = getattr(corpus, "VARIANTS", {})
    missed, undiagnosed, false_fails = [], [], []
    for n, r in results.items():
        if n.startswith(("mistake:", "variant:")):
            lost = [c for c in r["checks"] if not c["passed"]]
            expected = _expected_fails(corpus, n)
            if {c["id"] for c in lost} != expected:
                missed.append(f"{n} (lost {sorted(c['id'] for c in lost)}, listed {sorted(expected)})")
            elif any(c.get("diagnosis_id") != _expected_diagnosis(n, variants) for c in lost):
                undiagnosed.append(f"{n} (named {sorted({str(c.get('diagnosis_id')) for c in lost})})")
        elif (n.startswith("alternative:") or n == "solution") and r["score"] < r["max_score"]:
            false_fails.append(f"{n} ({r['score']:g}/{r['max_score']:g})")
    return missed, undiagnosed, false_fails


def _expected_fails(corpus, name: str) -> set:
    kind, what = name.split(":", 1)
    return set((corpus.VARIANTS if kind == "variant" else corpus.MUTANTS)[what].fails)


def _expected_diagnosis(name: str, variants: dict) -> str | None:
    """A mistake's named diagnosis is its own name; a variant (another spelling of a mistake) names its own."""
    kind, what = name.split(":", 1)
    return variants[what].diagnosis if kind == "variant" else what
