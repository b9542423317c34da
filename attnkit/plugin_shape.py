"""The parts of one assignment's folder the kit reads, and how they must fit together, without grading anything.

Each function returns plain sentences, one per problem (none: it holds), naming the file to edit. `attnkit check`
runs them; they are what the judge, the selfcheck and the class report assume.
"""
from __future__ import annotations

import ast

from attnkit.engine import config, registry
from attnkit.toolkit.corpus import Mutant

DRIVER_ARGS = ["module", "experiment", "tensors", "torch", "state"]
# name in mutants.py -> (required, what it must be); attnkit/toolkit/corpus.py documents each
CORPUS_NAMES = {"SOLUTION_CELL": (True, str), "MUTANTS": (True, dict), "ALTERNATIVES": (True, dict),
                "mutate": (True, callable), "alternative": (True, callable), "VARIANTS": (False, dict),
                "ALSO_FITS": (False, dict), "SPELLINGS": (False, dict), "ALONGSIDE": (False, (tuple, list)),
                "PREAMBLE": (False, str)}


def plugin_problems(a: str) -> list[str]:
    """The plug-in (``__init__.py``'s ASSIGNMENT against the manifest), the driver's ``run_experiment``, and the
    catalogue's entries marked as this assignment's."""
    folder = registry.get(a)
    try:
        plugin = folder.plugin()
    except Exception as e:  # noqa: BLE001 - whatever the course's code raises is the answer
        return [f"autograder/{a}/__init__.py: the plug-in does not load: {type(e).__name__}: {e}"]
    problems = []
    if not folder.driver.is_file():
        problems.append(f"autograder/{a}/drive.py is missing (it defines run_experiment)")
    else:
        tree = ast.parse(folder.driver.read_text(), str(folder.driver))
        run = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_experiment"]
        if not run:
            problems.append(f"autograder/{a}/drive.py defines no run_experiment({', '.join(DRIVER_ARGS)})")
        elif len(run[0].args.args) != len(DRIVER_ARGS):
            problems.append(f"autograder/{a}/drive.py: run_experiment takes {len(run[0].args.args)} arguments, "
                            f"not the 5 the child passes ({', '.join(DRIVER_ARGS)})")
    for m in plugin.mistakes:
        if m.assignment != a:
            problems.append(f"autograder/{a}/mistakes.py: the entry {m.id!r} says it belongs to {m.assignment!r}, "
                            f"not {a!r} (copied from another assignment?)")
    return problems


def corpus_problems(a: str) -> list[str]:
    """The names the kit reads in ``mutants.py``, and what they list: checks the manifest has."""
    try:
        c = registry.get(a).mutants()
    except Exception as e:  # noqa: BLE001
        return [f"autograder/{a}/mutants.py does not load: {type(e).__name__}: {e}"]
    problems = []
    for name, (required, kind) in CORPUS_NAMES.items():
        if not hasattr(c, name):
            if required:
                problems.append(f"autograder/{a}/mutants.py has no {name} (attnkit/toolkit/corpus.py lists what it holds)")
        elif not (kind(getattr(c, name)) if kind is callable else isinstance(getattr(c, name), kind)):
            problems.append(f"autograder/{a}/mutants.py: {name} is a {type(getattr(c, name)).__name__}")
    if problems:
        return problems
    cfg = config.load(a)
    if c.SOLUTION_CELL != cfg.contract.cell:
        problems.append(f"autograder/{a}/mutants.py: SOLUTION_CELL is {c.SOLUTION_CELL!r}, the manifest's "
                        f"[contract] cell is {cfg.contract.cell!r}")
    checks = {k.id for k in cfg.checks}
    for table in ("MUTANTS", "VARIANTS", "SPELLINGS"):
        for n, m in getattr(c, table, {}).items():
            if not isinstance(m, Mutant):
                problems.append(f"autograder/{a}/mutants.py: {table}[{n!r}] is not made with mutant() or variant()")
            elif m.fails - checks:
                problems.append(f"autograder/{a}/mutants.py: {table}[{n!r}] lists checks the manifest has not: "
                                f"{', '.join(sorted(m.fails - checks))}")
    unknown = set(getattr(c, "ALONGSIDE", ())) - checks
    if unknown:
        problems.append(f"autograder/{a}/mutants.py: ALONGSIDE names checks the manifest has not: {', '.join(sorted(unknown))}")
    return problems


def id_problems(a: str) -> list[str]:
    """Mistake ids: each once in the catalogue (``mistakes.py``); every mistake of the corpus named by an id the
    catalogue has (its own for MUTANTS, the listed ones for ALSO_FITS). Ids are the assignment's own:
    the kit qualifies them as ``<assignment>/<id>`` where assignments meet (attnkit/engine/diagnosis.py)."""
    mistakes = registry.get(a).plugin().mistakes
    ids = [m.id for m in mistakes]
    problems = [f"autograder/{a}/mistakes.py: mistake id {i!r} appears {ids.count(i)} times in the catalogue"
                for i in sorted(set(ids)) if ids.count(i) > 1]
    c = registry.get(a).mutants()
    known = set(ids)
    for n in c.MUTANTS:
        if n not in known:
            problems.append(f"autograder/{a}/mutants.py: MUTANTS[{n!r}] is no catalogue id (mistakes.py): its "
                            "diagnosis could never be named")
    # a variant may be named by reproduction (the plug-in's reproduce: an id outside the catalogue), so its name
    # is proven by grading it (the corpus invariant), not by the catalogue
    for n, also in getattr(c, "ALSO_FITS", {}).items():
        for i in [n, *also]:
            if i not in known:
                problems.append(f"autograder/{a}/mutants.py: ALSO_FITS names {i!r}, no catalogue id")
    return problems


def isolating(corpus, check_ids) -> dict[str, list[str]]:
    """check id -> the corpus mistakes that lose exactly it (with the corpus's ALONGSIDE checks allowed beside)."""
    alongside = set(getattr(corpus, "ALONGSIDE", ()))
    found = {c: [] for c in check_ids}
    for name, m in corpus.MUTANTS.items():
        own = set(m.fails) - alongside or set(m.fails)
        if len(own) == 1 and next(iter(own)) in found:
            found[next(iter(own))].append(name)
    return found


def isolation_problems(a: str) -> list[str]:
    """Every check is lost by some mistake of the corpus, and by one that loses it alone: a check no mistake
    loses is never shown to fail, one only lost together with others is never shown to see its own property."""
    c = registry.get(a).mutants()
    checks = [k.id for k in config.load(a).checks]
    lost = set().union(*(m.fails for m in c.MUTANTS.values()))
    problems = [f"check {k!r} is lost by no mistake of autograder/{a}/mutants.py: nothing shows it can fail"
                for k in checks if k not in lost]
    alone = isolating(c, checks)
    problems += [f"check {k!r} is lost alone by no mistake of autograder/{a}/mutants.py (each mistake losing it "
                 "loses another too; ALONGSIDE lists a check any wrong answer may lose beside)"
                 for k in checks if k in lost and not alone[k]]
    return problems


