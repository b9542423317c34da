"""Does a verdict depend on the grading key (the inputs drawn from it), or only on the submission?

The judge's inputs are seeded from the grading key (attnkit/engine/secret.py reads ATTNKIT_GRADING_KEY on
every call, so one process can switch keys): HMAC(key, assignment) decides the inputs, the submission cannot.
This grades the corpus of an assignment (or any folder of notebooks) under several keys. A corpus entry must
lose exactly its listed checks under every key (the solution and the alternatives: none); a notebook of a
folder, which lists nothing, must lose the same checks and get the same diagnosis under every key.
`attnkit check` and bench/key_dependence.py share it.
"""
from __future__ import annotations

import os
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def draw_keys(count: int, key_seed: int) -> list[str]:
    """``count`` grading keys (hex) drawn from ``key_seed``: the same seed, the same keys."""
    rng = random.Random(key_seed)
    return [rng.randbytes(32).hex() for _ in range(count)]


def fresh_key_seed() -> int:
    return random.SystemRandom().randrange(2**32)


def corpus_entries(assignment: str):
    """(name -> notebook, name -> listed fails or None for a correct one): the corpus of
    ``attnkit.mutants.submissions`` (mistakes, variants, alternatives, solution; not the unanswered release)
    plus its SPELLINGS."""
    from attnkit.mutants import apply_edits, module, solution_source, submission, submissions
    c = module(assignment)
    subs = {n: nb for n, nb in submissions(assignment).items() if n != "release"}
    sol = solution_source(assignment, c.SOLUTION_CELL)
    for n, m in getattr(c, "SPELLINGS", {}).items():
        subs[f"spelling:{n}"] = submission(assignment, {c.SOLUTION_CELL: apply_edits(sol, n, m)})
    table = {"mistake": c.MUTANTS, "variant": getattr(c, "VARIANTS", {}), "spelling": getattr(c, "SPELLINGS", {})}
    listed = {}
    for n in subs:
        kind, _, what = n.partition(":")
        listed[n] = frozenset(table[kind][what].fails) if kind in table else None
    return subs, listed


def folder_entries(folder: Path):
    """(name -> notebook, name -> None): every notebook of ``folder``, read as the judge reads one."""
    from attnkit.engine.judge import read_notebook
    paths = sorted(Path(folder).glob("*.ipynb"))
    if not paths:
        raise ValueError(f"no notebooks (*.ipynb) in {folder}")
    return {p.name: read_notebook(p) for p in paths}, {p.name: None for p in paths}


def lost(result) -> frozenset:
    return frozenset(c["id"] for c in result["checks"] if not c["passed"])


def verdict(result) -> tuple:
    """What must not depend on the key: the checks lost and the diagnosis named."""
    return lost(result), tuple(result.get("diagnosis_matches") or ())


def grade_under_keys(assignment: str, subs: dict, keys: list[str], jobs: int) -> dict[str, list[dict]]:
    """name -> its result under each key, in the order of ``keys``. The process's own key comes back after."""
    from attnkit.engine.judge import grade
    per_key = {n: [] for n in subs}
    before = os.environ.get("ATTNKIT_GRADING_KEY")
    try:
        for key in keys:
            os.environ["ATTNKIT_GRADING_KEY"] = key        # read per grade by secret.seed_for
            with ThreadPoolExecutor(max_workers=jobs) as ex:
                for n, r in zip(subs, ex.map(lambda nb: grade(nb, assignment), subs.values())):
                    per_key[n].append(r)
    finally:
        if before is None:
            os.environ.pop("ATTNKIT_GRADING_KEY", None)
        else:
            os.environ["ATTNKIT_GRADING_KEY"] = before
    return per_key


def inexact(per_key: dict[str, list[dict]], listed: dict, keys: list[str]) -> dict[str, list[str]]:
    """name -> lines saying how, for each corpus entry that did not lose exactly its listed checks (a correct
    one: none) under every key; entries that did are left out."""
    bad = {}
    for n, results in per_key.items():
        sets = [lost(r) for r in results]
        want = listed[n] if listed[n] is not None else frozenset()
        if all(s == want for s in sets):
            continue
        kind = "VARIES with the key" if len(set(sets)) > 1 else "DIFFERS from its listing"
        out = [f"{kind}: listed {sorted(want) or 'full marks'}"]
        for s, count in Counter(sets).most_common():
            extra, missing = sorted(s - want), sorted(want - s)
            keys_of = [keys[i][:8] for i, t in enumerate(sets) if t == s][:4]
            out.append(f"{count:3d}/{len(keys)} keys: " + ("as listed" if s == want else
                       f"{'+' + ','.join(extra) if extra else ''}{' -' + ','.join(missing) if missing else ''}"
                       f"  e.g. keys {' '.join(keys_of)}"))
        bad[n] = out
    return bad


def varying(per_key: dict[str, list[dict]], keys: list[str]) -> dict[str, list[str]]:
    """name -> lines saying how, for each notebook (nothing listed) whose lost checks or diagnosis vary."""
    bad = {}
    for n, results in per_key.items():
        sets = [verdict(r) for r in results]
        if len(set(sets)) > 1:
            bad[n] = [f"{count:3d}/{len(keys)} keys: loses {sorted(checks) or 'nothing'}, named {list(named) or 'nothing'}"
                      for (checks, named), count in Counter(sets).most_common()]
    return bad
