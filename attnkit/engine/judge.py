"""Grade one submission notebook: extract, run in a child, judge, report.

The one entry point both grading paths share (``attnkit grade`` and the
nbgrader preprocessor), so the two can never disagree on a score.
"""
from __future__ import annotations

import functools
import re

import nbformat

from attnkit.engine import channel, config, diagnosis, registry, secret
from attnkit.isolation import sandbox, untrusted
from attnkit.engine.results import CheckFailed, Results
from attnkit.isolation.untrusted import UnreadableNotebook  # noqa: F401 - part of the judge's interface


def _plugin(assignment: str):
    return registry.get(assignment).plugin()


def child_program(assignment: str, contract: config.Contract | None = None) -> str:
    """The grading child's program for ``assignment``: its driver, reaching the student's code by its contract
    (the manifest's, read here unless the caller has it)."""
    return sandbox.child_program(registry.get(assignment).driver, contract or config.load(assignment).contract)


@functools.lru_cache(maxsize=256)
def _plan(assignment: str, seed: int) -> dict:
    """The plan of ``assignment`` for ``seed`` (one per student: attnkit/engine/secret.py), kept for the
    student's next submission in this process. Read only: nothing in the judge writes into a plan's tensors.
    One thread: a plan's tensors are small, and torch's pool of threads costs 10x on a busy machine (15 ms a
    softmax of a few dozen numbers, 1.3 s a plan, against 40 ms on one thread). Kept for 256 students: a plan is
    tens of KB, and the check service judges the same students again."""
    import torch
    torch.set_num_threads(1)
    return _plugin(assignment).make_plan(seed)


def _tensors_for_child(plan) -> dict:
    return {k: v.numpy() for k, v in plan["tensors"].items()}


def read_notebook(path) -> nbformat.NotebookNode:
    """The submission as an nbformat-4 node, or UnreadableNotebook with a sentence for the student.

    Read in a helper process under a size, memory and time cap (``attnkit.isolation.untrusted``)."""
    return untrusted.read_notebook(path)


def run_submission(nb, assignment: str, limits: sandbox.Limits | None = None, seed: int | None = None,
                   student: str = ""):
    """Run the judge's experiments on notebook ``nb`` (path or nbformat node) in a child process.

    The notebook is read (for a path) and its definitions extracted inside limits, in a helper process
    (``attnkit.isolation.untrusted``): a notebook too large, too deep or too slow to parse raises
    UnreadableNotebook, never takes the judge's memory."""
    cfg, mod = config.load(assignment), _plugin(assignment)
    limits = limits or cfg.limits
    code = untrusted.student_code(nb, cfg.contract.name)
    # the student's secret inputs, never re-rolled; ``seed``: the same, computed where the key is (a Dask worker
    # is handed the student's seed, never the key)
    plan = _plan(assignment, secret.seed_for(assignment, student) if seed is None else seed)
    run = sandbox.run_child(child_program(assignment, cfg.contract),
                            {"source": code.source, "experiments": plan["experiments"], "modules": plan.get("modules", {})},
                            _tensors_for_child(plan), limits)
    names = [e["name"] for e in plan["experiments"]]
    # the names a page may print of what the child reports: the contract's, the plan's, the driver's own words
    public = " ".join([cfg.contract.name, *(k.split(".", 1)[-1] for k in plan["tensors"]),
                       *_driver_stages(assignment)[0]])
    return (Results(run, code, limits, names, helper_modules(assignment), public,
                    functools.partial(_known_stage, assignment, _strings(plan["experiments"]))), plan, cfg, mod)


def _strings(value) -> frozenset:
    """Every string in the plan's experiments (what a driver's stage may quote of them)."""
    if isinstance(value, str):
        return frozenset({value})
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return frozenset().union(*map(_strings, items)) if items else frozenset()


@functools.lru_cache(maxsize=8)
def _driver_stages(assignment: str) -> tuple[frozenset, tuple]:
    """The stages the assignment's driver names: its string literals, and its f-strings as patterns."""
    text = registry.get(assignment).driver.read_text()
    literals = re.findall(r'"([^"\n]{1,80})"', text) + re.findall(r"'([^'\n]{1,80})'", text)
    patterns = tuple(re.compile("".join("(.{1,80}?)" if part.startswith("{") else re.escape(part)
                                        for part in re.split(r"(\{[^{}]*\})", lit)))
                     for lit in literals if "{" in lit)
    return frozenset(literals), patterns


def _known_stage(assignment: str, quoted: frozenset, stage: str) -> bool:
    """Whether a page may show ``stage``, which the child reports and the submission shares the child's process:
    one of the driver's literals, or one of its f-strings filled with the plan's own strings."""
    literals, patterns = _driver_stages(assignment)
    if stage in literals:
        return True
    return any((m := p.fullmatch(stage)) and all(g in quoted for g in m.groups()) for p in patterns)


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


def grade(nb, assignment: str, limits: sandbox.Limits | None = None, seed: int | None = None,
          student: str = "") -> dict:
    """Judge notebook ``nb`` (path or nbformat node) of ``student`` (whose inputs are drawn: "" for the course's
    own draw). Returns the result dict of ``attnkit grade --json``."""
    cfg = config.load(assignment)
    try:
        if not isinstance(nb, dict):
            nb = read_notebook(nb)             # read once, inside the caps, so its form can be judged first
        refuse_unreadable(nb)
        results, plan, cfg, mod = run_submission(nb, assignment, limits, seed, student)
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
            why = channel.shown_message(str(e))     # the arrays are the submission's: no free text of theirs
            checks.append(_check(check, False, f"the submission's output has an unexpected form "
                                               f"({type(e).__name__}{': ' + why if why else ''})"))
    notes = results.reads_note()
    for c in checks:                     # a failed check says what the class read from the notebook's module level
        new = [n for n in notes if n not in c["message"]] if not c["passed"] else []
        if new:
            c["message"] = f"{c['message']}; note: {'; '.join(new)}"
    matched = _diagnose(assignment, mod, results, plan, checks)
    try:
        pattern = mod.attention_pattern(results, plan)
        if isinstance(pattern, dict) and pattern.get("student") is not None:
            pattern = dict(pattern, student=channel.picture(pattern["student"]))    # a few bits a cell, no more
    except Exception:  # noqa: BLE001 - a picture is a bonus, never a reason to fail grading
        pattern = None
    return {"assignment": assignment, "score": sum(c["points"] for c in checks), "max_score": cfg.max_score,
            "error": results.fatal(), "checks": checks, "attention": pattern, "diagnosis_matches": matched}


def _diagnose(assignment, mod, results, plan, checks) -> list:
    """Name the mistake on every failed check when the submission's numbers match one exactly: a catalogue entry,
    else one edit (or two) of the reference that reproduces them (the plug-in's ``reproduce``), else say in one
    sentence what was measured. A catalogue entry seen on the module itself (``Mistake.beside``) is named beside
    that, and an edit pair that reproduces every number replaces a catalogue entry that explains only part of
    them: two slips are both named. Returns the ids of every catalogue entry the evidence fits (the corpus tests
    hold each mutant to its own one alone)."""
    if all(c["passed"] for c in checks):
        return []                        # nothing to name: a correct submission pays for no evidence
    try:
        found = diagnosis.matches(assignment, mod.evidence(results, plan))
    except Exception:  # noqa: BLE001 - evidence from strange arrays: say nothing rather than guess
        found = []
    numeric = [m for m in found if not m.beside]
    failed = [c for c in checks if not c["passed"]]
    named = [(numeric[0].id, _text(numeric[0], results, failed))] if numeric else []
    edit = _reproduced(mod, results, plan)
    if edit and edit[0] in {m.id for m in found}:
        edit = None                      # an edit that is a catalogue entry the evidence fits: said in its words
    if edit and (not named or "+" in edit[0]):   # a pair reproduces what one catalogue entry explains in part
        named = [edit]
    told = {part for i, _ in named for part in i.split("+")}       # an edit pair already naming it says it once
    named += [(m.id, m.text()) for m in found if m.beside and m.id not in told]
    stop = None if named else results.stopping_error([c["message"] for c in failed])
    stopped = [c for c in failed if stop and stop.explains(c["message"])]
    rest = [c for c in failed if c not in stopped]
    if len(stopped) > 1 and len(stopped) > len(rest) and not any(" raised " in c["message"] for c in rest):
        # one error stopped all, or most, of the lost checks and the others raised nothing: each of those says
        # what it measured (blind set 7: position rows looked up by token id raise on every window but length 1)
        said = diagnosis.stopped(stop.sentence, stop.line, len(stopped), len(failed))
        for c in failed:
            c["diagnosis"], c["diagnosis_id"] = (said, diagnosis.raised_id(stop.type)) if c in stopped else \
                (diagnosis.measured(c["message"]), None)
        return [m.id for m in found]
    for c in failed:
        c["diagnosis"] = diagnosis.joined([t for _, t in named]) if named else diagnosis.measured(failed[0]["message"])
        c["diagnosis_id"] = "+".join(i for i, _ in named) if named else None
    return [m.id for m in found]


def _text(mistake, results, failed) -> str:
    """A catalogue entry's text, with the error that stopped its failing runs and its line when it quotes one."""
    stop = results.stopping_error([c["message"] for c in failed]) if mistake.quotes_error else None
    return diagnosis.where_it_failed(mistake.text(), stop.sentence, stop.line) if stop else mistake.text()


def _reproduced(mod, results, plan) -> tuple[str, str] | None:
    """(id, text) of the one edit of the reference that reproduces the submission, or None when none does or
    several different ones do (numbers that do not single out a slip are not named)."""
    try:
        edits = mod.reproduce(results, plan)
    except Exception:  # noqa: BLE001 - strange arrays: say what was measured rather than guess
        return None
    ids = list(dict.fromkeys(i for i, _ in edits))
    if len(ids) != 1:
        return None
    return ids[0], diagnosis.reproduced_text(edits[0][1])
