"""What an assignment's ``mutants.py`` imports: the corpus of submissions the kit tests its checks with.

``autograder/<A>/mutants.py`` is a module the kit reads by these names (``attnkit check`` says which is missing):

==================  =======================================================================================
``SOLUTION_CELL``   str: the grade id of the cell the student writes in (``contract_cell(__file__)``)
``MUTANTS``         dict[str, Mutant]: mistake id -> a typical mistake as edits of the solution cell (``mutant``);
                    the id is its catalogue entry's (``mistakes.py``), the diagnosis it must get
``ALTERNATIVES``    dict[str, str]: name -> a correct answer written differently (it must keep every point)
``mutate``          (solution_src: str, name: str) -> str: the solution cell with MUTANTS[name]'s edits
``alternative``     (name: str) -> str: the answer cell of ALTERNATIVES[name] (usually ``PREAMBLE`` + it)
``VARIANTS``        optional dict[str, Mutant]: another spelling of a mistake (``variant``), with the catalogue
                    id it must be named by (None: only "no known pattern")
``ALSO_FITS``       optional dict[str, tuple[str, ...]]: mistake id -> other catalogue ids its evidence also fits
``SPELLINGS``       optional dict[str, Mutant]: further spellings graded only under many keys (key dependence)
``ALONGSIDE``       optional tuple[str, ...]: check ids a mistake may lose beside the one it isolates (a whole-output
                    comparison that any wrong answer loses); see ``attnkit check``'s "every check lost alone"
``PREAMBLE``        optional str: imports an alternative's cell starts with (read only by the module itself)
==================  =======================================================================================

Ids here are the assignment's own: the kit qualifies them as ``<assignment>/<id>`` wherever assignments meet.
Nothing here imports torch or anything of the kit above the toolkit.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: the same parser, as tomli (pinned for 3.10)
    import tomli as tomllib


@dataclass(frozen=True)
class Mutant:
    what: str
    edits: tuple          # (old, new) substring replacements applied to the solution cell
    fails: frozenset      # exactly the checks this mistake must fail
    diagnosis: str | None = None     # a variant's named mistake (a MUTANTS entry's is its own name)


def mutant(what: str, edits, *fails: str) -> Mutant:
    return Mutant(what, tuple(edits), frozenset(fails))


def variant(what: str, diagnosis: str | None, edits, *fails: str) -> Mutant:
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


def contract_cell(here: str) -> str:
    """The solution cell's grade id, from the manifest.toml beside ``here`` (a module's ``__file__``)."""
    manifest = Path(here).resolve().parent / "manifest.toml"
    return tomllib.loads(manifest.read_text())["contract"]["cell"]


def solution_source(here: str, grade_id: str) -> str:
    """The source of cell ``grade_id`` of the instructor's notebook (``source/<A>.ipynb`` beside ``here``)."""
    folder = Path(here).resolve().parent
    nb = json.loads((folder / "source" / f"{folder.name}.ipynb").read_text())
    for c in nb["cells"]:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return c["source"] if isinstance(c["source"], str) else "".join(c["source"])
    raise KeyError(f"{folder.name}: no cell {grade_id!r} in source/{folder.name}.ipynb")


# Pieces of the fused-attention variants: attempts to blind the grader around a fused call.
def lines(code, indent: int = 8) -> str:
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


def modes_popped(body) -> str:
    """``body`` run with every torch-function mode popped, then pushed back as if nothing happened."""
    return lines(["tf = getattr(torch, '_' + 'C')",
                   "modes = [getattr(tf, '_pop_torch_' + 'function_stack')()",
                   "         for _ in range(getattr(tf, '_len_torch_' + 'function_stack')())]",
                   "try:", "    " + lines(body, 12), "finally:",
                   "    for m in reversed(modes):", "        getattr(tf, '_push_on_torch_' + 'function_stack')(m)"])
