"""What the student's kernel run may change in the graded notebook: the outputs of non-grade code cells.

On the nbgrader path, ``SandboxedExecute`` runs the student's notebook in a real Jupyter kernel
(``attnkit.isolation.sandbox.run_notebook``) so that students and TAs see its outputs. Everything that run
returns is written by code the student controls: it can hand back any JSON at all (a notebook with
every test passing, other points, other cells, a different written answer, the instructor's
solution, gigabytes of output). So the executed notebook is never graded and never replaces the
submission. ``merge`` keeps the sanitized submission ``nb`` (its cells, sources, ids, metadata,
points and grade cells, and the notebook's metadata) and copies into it only

- the outputs and execution count of code cells that are **not** grade cells,
- when the executed cell at the same position is a code cell with the identical source (and the
  same cell id, where both have one),
- each output rebuilt from the fields nbformat v4 defines for its type (stream, display_data,
  execute_result, error) with the types it defines; anything else is dropped,
- at most ``MAX_CELL_BYTES`` per cell and ``MAX_TOTAL_BYTES`` for the notebook.

Where something was dropped, the cell gets a short stdout note saying so. Grade cells (test cells,
the written answer, solution cells that are grade cells) never take anything from the run: test
cells get the judge's verdict afterwards (``JudgeGradeCells``); a code grade cell that the judge does
not grade gets an error output saying a TA must grade it, because nbgrader gives full marks to a code
grade cell without outputs and the kernel's outputs cannot be trusted to say otherwise.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

from nbformat import NotebookNode
from nbformat.v4 import new_output

# A figure the course's notebooks draw is 20-100 KB as an inline PNG; a cell printing a few tables or
# plotting a handful of figures stays well under 2 MiB. The feedback HTML embeds every output (base64
# images), for every student: 20 MiB in all keeps each page openable in a browser and a class of 300
# under 6 GiB of autograded notebooks, whatever a submission prints.
MAX_CELL_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 20 * 1024 * 1024
MAX_JSON_DEPTH = 64                      # nesting of application/json data and output metadata
STREAM_NAMES = ("stdout", "stderr")
MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$")

NOT_JUDGED = ("this grade cell is not graded by attnkit's judge, and the student's kernel run cannot be trusted "
              "to grade it: a TA must grade it")


def is_grade_cell(cell) -> bool:
    nbg = cell.get("metadata", {}).get("nbgrader", {})
    return isinstance(nbg, Mapping) and bool(nbg.get("grade"))


def is_solution_cell(cell) -> bool:
    nbg = cell.get("metadata", {}).get("nbgrader", {})
    return isinstance(nbg, Mapping) and bool(nbg.get("solution"))


def _text(value) -> str | None:
    """nbformat's multiline string: a str, or a list of str joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


def _json_value(value, depth: int = 0) -> bool:
    """Plain JSON (what json.loads gives), nested at most MAX_JSON_DEPTH deep, finite numbers."""
    if depth > MAX_JSON_DEPTH:
        return False
    if value is None or isinstance(value, (bool, str, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_value(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_value(v, depth + 1) for k, v in value.items())
    return False


def _mime_bundle(data) -> dict | None:
    if not isinstance(data, Mapping):
        return None
    out = {}
    for mime, value in data.items():
        if not isinstance(mime, str) or not MIME.match(mime):
            return None
        if mime == "application/json" or mime.endswith("+json"):
            if not _json_value(value):
                return None
            out[mime] = value
        else:
            text = _text(value)
            if text is None:
                return None
            out[mime] = text
    return out


def _metadata(value) -> dict | None:
    if value is None:
        return {}
    return dict(value) if isinstance(value, Mapping) and _json_value(value) else None


def _execution_count(value):
    """An int a notebook can hold, or None (bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 31 else None


def clean_output(output) -> NotebookNode | None:
    """``output`` rebuilt from its nbformat v4 fields, or None when it is not a valid v4 output."""
    if not isinstance(output, Mapping):
        return None
    kind = output.get("output_type")
    if kind == "stream":
        text = _text(output.get("text"))
        if output.get("name") not in STREAM_NAMES or text is None:
            return None
        return new_output("stream", name=output["name"], text=text)
    if kind in ("display_data", "execute_result"):
        data, metadata = _mime_bundle(output.get("data")), _metadata(output.get("metadata"))
        if data is None or metadata is None:
            return None
        if kind == "display_data":
            return new_output("display_data", data=data, metadata=metadata)
        count = output.get("execution_count")
        if count is not None and _execution_count(count) is None:
            return None
        return new_output("execute_result", data=data, metadata=metadata, execution_count=count)
    if kind == "error":
        ename, evalue, tb = output.get("ename"), output.get("evalue"), output.get("traceback")
        if not (isinstance(ename, str) and isinstance(evalue, str) and isinstance(tb, list)
                and all(isinstance(line, str) for line in tb)):
            return None
        return new_output("error", ename=ename, evalue=evalue, traceback=list(tb))
    return None


def _size(output: NotebookNode) -> int | None:
    """Bytes of ``output`` in the notebook file, or None when it cannot be written as UTF-8 (lone surrogates)."""
    try:
        return len(json.dumps(output, ensure_ascii=False).encode("utf-8"))
    except (UnicodeEncodeError, ValueError, TypeError):
        return None


def _note(text: str) -> NotebookNode:
    return new_output("stream", name="stdout", text=f"[attnkit: {text}]\n")


def _same_cell(cell, ran) -> bool:
    """The executed cell is this submission cell: a code cell with the identical source (and id)."""
    if not isinstance(ran, Mapping) or ran.get("cell_type") != "code":
        return False
    if _text(ran.get("source")) != cell.source:
        return False
    mine, theirs = cell.get("id"), ran.get("id")
    return mine is None or theirs is None or mine == theirs


def merge(nb: NotebookNode, executed, judged_cells=frozenset(), log=None) -> NotebookNode:
    """``nb`` (modified in place and returned) with the kernel run's outputs of its non-grade code cells.

    ``executed``: whatever the kernel run returned (a notebook as a dict, None, or anything else);
    untrusted. ``judged_cells``: the grade ids whose verdicts ``JudgeGradeCells`` writes.
    """
    ran = executed.get("cells") if isinstance(executed, Mapping) else None
    if not isinstance(ran, list):
        if executed is not None and log:
            log("the kernel run returned no notebook; no outputs are shown")
        ran = None
    total = 0
    dropped_cells = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if is_grade_cell(cell):
            # never from the kernel: test cells get the judge's verdict next, solution grade cells
            # are graded by hand (nbgrader reads no output of theirs)
            grade_id = cell.metadata["nbgrader"].get("grade_id")
            if not is_solution_cell(cell) and grade_id not in judged_cells:
                cell.outputs = [new_output("error", ename="NotJudged", evalue=NOT_JUDGED,
                                           traceback=[f"NotJudged: {NOT_JUDGED}"])]
            continue
        if ran is None:
            continue
        other = ran[i] if i < len(ran) else None
        if not _same_cell(cell, other):
            if other is not None:
                dropped_cells += 1
                cell.outputs = [_note("the kernel run's outputs of this cell are not shown: "
                                      "its copy of the cell differs from the submission")]
            continue
        outputs, invalid, big = [], 0, 0
        cell_bytes = 0
        raw = other.get("outputs")
        for output in raw if isinstance(raw, list) else []:
            clean = clean_output(output)
            size = None if clean is None else _size(clean)
            if size is None:
                invalid += 1
                continue
            if cell_bytes + size > MAX_CELL_BYTES or total + size > MAX_TOTAL_BYTES:
                big += 1
                continue
            cell_bytes += size
            total += size
            outputs.append(clean)
        if raw is not None and not isinstance(raw, list):
            invalid += 1
        if invalid:
            outputs.append(_note(f"{invalid} output(s) of this cell are not shown: not valid notebook outputs"))
        if big:
            outputs.append(_note(f"{big} output(s) of this cell are not shown: over the limit of "
                                 f"{MAX_CELL_BYTES // 2 ** 20} MiB per cell and {MAX_TOTAL_BYTES // 2 ** 20} MiB "
                                 f"per notebook"))
        cell.outputs = outputs
        cell.execution_count = _execution_count(other.get("execution_count"))
    if dropped_cells and log:
        log(f"the kernel run's copy of {dropped_cells} cell(s) differs from the submission; their outputs are not shown")
    return nb
