"""Corpora of submissions: typical mistakes (as edits of a solution cell) and correct alternatives.

Each assignment's own is ``autograder/<A>/mutants.py``; this module holds what they share, and builds
the corpus's notebooks the way a student would: the release with the answer cell filled in.
"""
from dataclasses import dataclass

import nbformat

from attnkit.engine import registry


@dataclass(frozen=True)
class Mutant:
    what: str
    edits: tuple          # (old, new) substring replacements applied to the solution cell
    fails: frozenset      # exactly the checks this mistake must fail
    diagnosis: str | None = None     # a variant's named mistake (a MUTANTS entry's is its own name)


def mutant(what, edits, *fails) -> Mutant:
    return Mutant(what, tuple(edits), frozenset(fails))


def variant(what, diagnosis, edits, *fails) -> Mutant:
    """Another submission of a mistake already in MUTANTS (e.g. the same fused call, obfuscated): it must
    lose exactly ``fails`` and be named ``diagnosis`` (None: the judge may only say "no known pattern")."""
    return Mutant(what, tuple(edits), frozenset(fails), diagnosis)


def apply_edits(solution_src: str, name: str, m: Mutant) -> str:
    src = solution_src
    for old, new in m.edits:
        if old not in src:
            raise ValueError(f"mistake {name!r}: {old!r} not in the solution cell")
        src = src.replace(old, new)
    return src


def module(assignment: str):
    """The mutant submissions of one assignment: MUTANTS, ALTERNATIVES, SOLUTION_CELL, mutate(), alternative()."""
    return registry.get(assignment).mutants()


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def solution_source(assignment: str, grade_id: str) -> str:
    nb = nbformat.read(registry.get(assignment).source / f"{assignment}.ipynb", as_version=4)
    return cell(nb, grade_id).source


def submission(assignment: str, answers: dict[str, str], base: str = "release"):
    """The committed release (or source) notebook with the cells named in ``answers`` replaced."""
    folder = registry.get(assignment).source if base == "source" else registry.course() / base / assignment
    nb = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    for grade_id, src in answers.items():
        cell(nb, grade_id).source = src
    return nb


def submissions(assignment: str) -> dict:
    """name -> notebook: the solution, the unanswered release, every mistake, every variant of one
    (``variant:NAME``) and every alternative."""
    c = module(assignment)
    sol = solution_source(assignment, c.SOLUTION_CELL)
    subs = {"solution": submission(assignment, {c.SOLUTION_CELL: sol}), "release": submission(assignment, {})}
    subs.update({f"mistake:{n}": submission(assignment, {c.SOLUTION_CELL: c.mutate(sol, n)}) for n in c.MUTANTS})
    subs.update({f"variant:{n}": submission(assignment, {c.SOLUTION_CELL: apply_edits(sol, n, m)})
                 for n, m in getattr(c, "VARIANTS", {}).items()})
    subs.update({f"alternative:{n}": submission(assignment, {c.SOLUTION_CELL: c.alternative(n)})
                 for n in c.ALTERNATIVES})
    return subs


# Pieces of the fused-attention variants of both assignments: attempts to blind the grader around the call.
def lines(code, indent=8):
    """Lines of code joined for a method body at ``indent``."""
    return ("\n" + " " * indent).join(code)


STOP_PROFILER = lines(["ag = getattr(getattr(torch, '_' + 'C'), '_auto' + 'grad')",   # whichever recorder runs
                        "for stop in (ag._disable_profiler, ag._disable_profiler_legacy):",
                        "    try:", "        stop()", "    except RuntimeError:", "        pass"])


RESTART_PROFILER = ("ag._enable_profiler_legacy(torch.autograd.ProfilerConfig(torch.autograd.ProfilerState.CPU, "
                    "False, False, False, False, False, torch._C._profiler._ExperimentalConfig()))")   # one of its own


# The grader's stand-ins for torch's attention kernels taken away through the watch's own globals, reached
# from one of its Python stand-ins (what attnkit/isolation/op_watch.py cannot prevent, only notice): torch's own
# kernels run unwatched after it.
UNREGISTER_STAND_INS = lines(["mha = getattr(torch.nn.functional, 'multi_head_' + 'attention_forward')",
                               "watch = getattr(mha, '__glob' + 'als__', {}).get('_ow_' + 'torch') or {}",
                               "if 'lib' in watch:             # in the grading child; in a notebook, nothing",
                               "    watch['lib']._destroy()"])


def modes_popped(body):
    """``body`` run with every torch-function mode popped, then pushed back as if nothing happened."""
    return lines(["tf = getattr(torch, '_' + 'C')",
                   "modes = [getattr(tf, '_pop_torch_' + 'function_stack')()",
                   "         for _ in range(getattr(tf, '_len_torch_' + 'function_stack')())]",
                   "try:", "    " + lines(body, 12), "finally:",
                   "    for m in reversed(modes):", "        getattr(tf, '_push_on_torch_' + 'function_stack')(m)"])
