"""Grade one submission notebook: extract, run in a child, judge, report.

The one entry point both grading paths share (``attnkit grade`` and the
nbgrader preprocessor), so the two can never disagree on a score.
"""
from __future__ import annotations

import functools

import nbformat

from attnkit.engine import config, diagnosis, registry, secret
from attnkit.isolation import sandbox, untrusted
from attnkit.engine.results import CheckFailed, Results
from attnkit.isolation.untrusted import UnreadableNotebook  # noqa: F401 - part of the judge's interface


def _plugin(assignment: str):
    return registry.get(assignment).plugin()


def child_program(assignment: str, contract: config.Contract | None = None) -> str:
    """The grading child's program for ``assignment``: its driver, reaching the student's code by its contract
    (the manifest's, read here unless the caller has it)."""
    return sandbox.child_program(registry.get(assignment).driver, contract or config.load(assignment).contract)


@functools.lru_cache(maxsize=8)
def _plan(assignment: str, seed: int) -> dict:
    """The plan of ``assignment`` for ``seed``, made once per process: the seed is the course's (one per
    assignment and key), so a class shares it, and its built inputs (plan.py) are not paid per submission.
    Read only: nothing in the judge writes into a plan's tensors."""
    return _plugin(assignment).make_plan(seed)


def _tensors_for_child(plan) -> dict:
    return {k: v.numpy() for k, v in plan["tensors"].items()}


def read_notebook(path) -> nbformat.NotebookNode:
    """The submission as an nbformat-4 node, or UnreadableNotebook with a sentence for the student.

    Read in a helper process under a size, memory and time cap (``attnkit.isolation.untrusted``)."""
    return untrusted.read_notebook(path)


def run_submission(nb, assignment: str, limits: sandbox.Limits | None = None, seed: int | None = None):
    """Run the judge's experiments on notebook ``nb`` (path or nbformat node) in a child process.

    The notebook is read (for a path) and its definitions extracted inside limits, in a helper process
    (``attnkit.isolation.untrusted``): a notebook too large, too deep or too slow to parse raises
    UnreadableNotebook, never takes the judge's memory."""
    cfg, mod = config.load(assignment), _plugin(assignment)
    limits = limits or cfg.limits
    code = untrusted.student_code(nb, cfg.contract.name)
    # the course's secret inputs, never re-rolled; ``seed``: the same, computed where the key is (a Dask worker
    # is handed the seed of the instructor's course, never the key)
    plan = _plan(assignment, secret.seed_for(assignment) if seed is None else seed)
    run = sandbox.run_child(child_program(assignment, cfg.contract),
                            {"source": code.source, "experiments": plan["experiments"], "modules": plan.get("modules", {})},
                            _tensors_for_child(plan), limits)
    names = [e["name"] for e in plan["experiments"]]
    return Results(run, code, limits, names, helper_modules(assignment)), plan, cfg, mod


def helper_modules(assignment: str) -> frozenset:
    """The modules the release ships beside the notebook (corpus.py, wordlm.py, ...): a notebook imports them,
    the grading child does not have them, and that is the kit's business, never the student's."""
    return registry.get(assignment).helper_modules()


def refuse_unreadable(nb) -> None:
    """A notebook the judge cannot grade as this assignment's says so in one sentence (UnreadableNotebook):
    an old format Jupyter converted on reading (nbformat 3: its cells are not the release's cells), no cells,
    or no code cell at all."""
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    orig = meta.get("orig_nbformat") if isinstance(meta, dict) else None
    version = orig if isinstance(orig, int) else nb.get("nbformat") if isinstance(nb, dict) else None
    if isinstance(version, int) and version < 4:
        raise UnreadableNotebook(f"the notebook is in the old format nbformat {version}: open the assignment's "
                                 "release notebook in Jupyter, put your answers in its cells and submit that "
                                 "(nbformat 4)")
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list) or not cells:
        raise UnreadableNotebook("the notebook has no cells: was it saved before it was submitted?")
    if not any(isinstance(c, dict) and c.get("cell_type") == "code" for c in cells):
        raise UnreadableNotebook("the notebook has no code cells, so there is no `class` to grade")


def _check(check, passed: bool, message: str) -> dict:
    return {"id": check.id, "title": check.title, "passed": passed, "points": check.points if passed else 0.0,
            "max_points": check.points, "message": message, "diagnosis": None}


def grade(nb, assignment: str, limits: sandbox.Limits | None = None, seed: int | None = None) -> dict:
    """Judge notebook ``nb`` (path or nbformat node). Returns the result dict of ``attnkit grade --json``."""
    cfg = config.load(assignment)
    try:
        if not isinstance(nb, dict):
            nb = read_notebook(nb)             # read once, inside the caps, so its form can be judged first
        refuse_unreadable(nb)
        results, plan, cfg, mod = run_submission(nb, assignment, limits, seed)
    except UnreadableNotebook as e:
        return cfg.refused(str(e) or "the notebook could not be read as a Jupyter notebook")
    checks = []
    for check in cfg.checks:
        try:
            mod.checks[check.id](results, plan)
            checks.append(_check(check, True, "passed"))
        except CheckFailed as e:
            checks.append(_check(check, False, str(e)))
        except (IndexError, RuntimeError, ValueError, TypeError) as e:
            # arrays of a form no check anticipated: the submission's output, not a verdict to guess
            checks.append(_check(check, False, f"the submission's output has an unexpected form "
                                               f"({type(e).__name__}: {str(e)[:200]})"))
    notes = results.reads_note()
    for c in checks:                     # a failed check says what the class read from the notebook's module level
        new = [n for n in notes if n not in c["message"]] if not c["passed"] else []
        if new:
            c["message"] = f"{c['message']}; note: {'; '.join(new)}"
    matched = _diagnose(assignment, mod, results, plan, checks)
    try:
        pattern = mod.attention_pattern(results, plan)
    except Exception:  # noqa: BLE001 - a picture is a bonus, never a reason to fail grading
        pattern = None
    return {"assignment": assignment, "score": sum(c["points"] for c in checks), "max_score": cfg.max_score,
            "error": results.fatal(), "checks": checks, "attention": pattern, "diagnosis_matches": matched}


def _diagnose(assignment, mod, results, plan, checks) -> list:
    """Name the mistake on every failed check when the submission's numbers match one exactly. Returns the ids
    of every catalogue entry the evidence fits (the corpus tests hold each mutant to its own one alone)."""
    if all(c["passed"] for c in checks):
        return []                        # nothing to name: a correct submission pays for no evidence
    try:
        found = diagnosis.matches(assignment, mod.evidence(results, plan))
    except Exception:  # noqa: BLE001 - evidence from strange arrays: say nothing rather than guess
        found = []
    for c in checks:
        if not c["passed"]:
            c["diagnosis"] = found[0].text() if found else diagnosis.NO_PATTERN
            c["diagnosis_id"] = found[0].id if found else None
    return [m.id for m in found]
