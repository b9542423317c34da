"""The shape of a submitted notebook, checked from its bytes before anything parses them.

nbformat builds, validates and converts a Python object for every JSON value of a notebook, and
nbgrader does so several times per submission: a 26 MB file of 400,000 empty cells cost 377 s and
3.4 GiB of the grader's memory (nbformat alone: read 66 s, validate 30 s, write 70 s), within the
64 MB file cap. What costs is the number and the nesting of values, not the bytes, so these caps bound
them, checked by ``check(data)`` on the raw bytes: a scan that builds nothing (memory: the nesting
stack), finds strings' ends and the next bracket with C-speed ``bytes.find``/``re`` and does Python work
only per string, list and object. A refused 64 MB notebook costs at most ~2 s and no memory beyond
its bytes; an honest one a few milliseconds.

Caps are kit constants here (like the file cap, ``attnkit.isolation.files.MAX_NOTEBOOK_BYTES``), not
assignment limits of the manifest: they protect the grading machine from whatever file is handed in,
for every nbgrader assignment of the course (attnkit's or not), before the assignment's configuration
matters; and an honest notebook is far below every one (the release notebooks have 40-60 cells, a few
hundred strings of source and outputs; a big figure is one string of a few MB). ``check`` holds:

- where a notebook file is read for the judge (``attnkit.isolation.untrusted._read``: ``attnkit grade``,
  Gradescope), before ``nbformat.reads``;
- where nbgrader reads a student's notebook (``attnkit.nbgrader_ext.patch.read_notebook``:
  ``nbgrader autograde``, ``nbgrader generate_feedback`` and ``attnkit autograde``), before ``nbformat.reads``.

The scan does not validate JSON: nbformat does, afterwards. It only has to see every value that
``json.loads`` would build: where it meets a closing bracket that does not match (which ``json.loads``
stops at, or before), it stops too.
"""
from __future__ import annotations

import json
import re

MAX_CELLS = 5_000                  # the release has 40-60; a student adds a few dozen
MAX_DEPTH = 64                     # nbformat's own structure is 6 deep; a widget or Vega output ~15
MAX_VALUES = 200_000               # strings, numbers, lists, objects: a 60-cell notebook has ~5,000; each costs
                                   # nbformat ~50 us to build, validate and write (4,999 cells of 45 keys: 45 s)
MAX_KEYS = 10_000                  # keys of one object (metadata, an output's mime bundle, a JSON output)
MAX_SOURCE_BYTES = 16 << 20        # all cells' source, as JSON text (the judge's code cap is 16 MB too)
MAX_OUTPUTS_PER_CELL = 2_000       # one per display() call: a loop of plots
MAX_OUTPUTS = 10_000
MAX_OUTPUT_BYTES = 32 << 20        # one output: a figure is a few MB of base64
MAX_METADATA_BYTES = 16 << 20      # the notebook's metadata (saved widget state can be MBs)
MAX_CELL_METADATA_BYTES = 1 << 20
MAX_ATTACHMENT_BYTES = 32 << 20    # a markdown cell's pasted images

ADVICE = "hand in the assignment's notebook with your answers in it"


class Refused(ValueError):
    """The notebook's shape is over a cap; the message is one sentence for the student."""


def _n(k: int) -> str:
    return f"{k:,}"


def _mb(k: int) -> str:
    return f"{k / (1 << 20):.0f} MB" if k >= 10 << 20 else f"{k / (1 << 20):.1f} MB"


def too_many_values() -> str:
    return (f"your notebook holds more than {_n(MAX_VALUES)} values (strings, numbers, lists, objects, escaped "
            f"quotes); a notebook may hold at most {_n(MAX_VALUES)}: {ADVICE}")


_NEXT = re.compile(rb'["\[\]{}]')          # the next string or bracket; numbers, literals, commas are skipped in C
_COLON = re.compile(rb'[ \t\r\n]*:')

_Q, _BS, _LB, _LS, _RB, _RS = b'"'[0], b"\\"[0], b"{"[0], b"["[0], b"}"[0], b"]"[0]

# What a list or object is, from where it stands (its parent's role and key): only these are measured.
ROOT, CELLS, CELL, SOURCE, OUTPUTS, OUTPUT, NB_META, CELL_META, ATTACHMENTS, WORKSHEETS, WORKSHEET, OTHER = range(12)
_CHILD = {(None, None): ROOT, (ROOT, b"cells"): CELLS, (ROOT, b"metadata"): NB_META,
          (ROOT, b"worksheets"): WORKSHEETS, (WORKSHEETS, None): WORKSHEET, (WORKSHEET, b"cells"): CELLS,
          (CELLS, None): CELL, (CELL, b"source"): SOURCE, (CELL, b"input"): SOURCE, (CELL, b"outputs"): OUTPUTS,
          (CELL, b"metadata"): CELL_META, (CELL, b"attachments"): ATTACHMENTS, (OUTPUTS, None): OUTPUT}


def _string_end(data: bytes, i: int, budget: int) -> tuple[int, int]:
    """(the index just past the string opened at ``i - 1``, the Python steps it took). The end of data if it is
    unterminated. One step per escaped quote (an escaped quote is a quote after an odd run of backslashes,
    counted 256 at a time): ``\\n`` and the rest cost nothing beyond ``bytes.find``. Past ``budget`` steps it
    returns where it stands (the caller refuses the notebook then)."""
    steps = 0
    while True:
        q = data.find(b'"', i)
        if q < 0:
            return len(data), steps
        if data[q - 1] != _BS:                   # the usual string; data[i - 1] is the opening quote
            return q + 1, steps
        run, k = 0, q
        while k > i:
            chunk = data[max(i, k - 256):k]
            kept = len(chunk.rstrip(b"\\"))
            run += len(chunk) - kept
            steps += 1
            if kept:
                break
            k -= len(chunk)
        if run % 2 == 0 or steps > budget:
            return q + 1, steps
        i = q + 1


_NBGRADER_CELL_TYPE = re.compile(rb'"nbgrader"[ \t\r\n]*:[ \t\r\n]*\{[ \t\r\n]*"cell_type"')


def _count_cells(data: bytes) -> int:
    """How many cells the notebook has, for the sentence once the scan stopped at the cap: at C speed, the
    strings "cell_type" (a key or value, never text: a quote inside a string is escaped) less the ones opening
    nbgrader's cell metadata (its first key as Jupyter writes it). Only the message depends on it."""
    return data.count(b'"cell_type"') - len(_NBGRADER_CELL_TYPE.findall(data))


def _key(data: bytes, i: int, j: int) -> bytes:
    """The key whose JSON string spans ``data[i:j]`` (quotes included), as ``json.loads`` reads it: escapes
    decoded, so ``"c\u0065lls"`` is ``cells`` (an attack on the caps spelt the structure's keys that way); only
    keys the structure uses matter, and none is long."""
    raw = data[i + 1:j - 1]
    if b"\\" not in raw:
        return raw if len(raw) <= 32 else b""
    if j - i > 4096:
        return b""
    try:
        return json.loads(data[i:j]).encode("utf-8", "surrogatepass")
    except ValueError:
        return b""


class _Frame:
    __slots__ = ("role", "kind", "start", "key", "keys", "cell")

    def __init__(self, role, kind, start, cell):
        self.role, self.kind, self.start, self.key, self.keys, self.cell = role, kind, start, None, 0, cell


def check(data: bytes) -> None:
    """Refused (one sentence) when the notebook JSON in ``data`` is over a cap; None otherwise."""
    stack: list[_Frame] = []
    values = cells = outputs = cell_outputs = source = 0
    pos, end = 0, len(data)

    def where(frame) -> str:
        return f" (in cell {frame.cell})" if frame is not None and frame.cell else ""

    while pos < end:
        m = _NEXT.search(data, pos)
        if m is None:
            return
        i = m.start()
        values += data.count(b",", pos, i) + 1          # the scalars skipped over, and this value
        if values > MAX_VALUES:
            raise Refused(too_many_values())
        c = data[i]
        top = stack[-1] if stack else None
        if c == _Q:
            j, steps = _string_end(data, i + 1, MAX_VALUES - values)
            values += steps                               # escaped quotes: the scan steps over each
            if values > MAX_VALUES:
                raise Refused(too_many_values())
            colon = _COLON.match(data, j) if top is not None and top.kind == _LB else None
            if colon is not None:                          # a key
                top.key = _key(data, i, j)
                top.keys += 1
                if top.keys > MAX_KEYS:
                    raise Refused(f"an object in your notebook{where(top)} has more than {_n(MAX_KEYS)} keys; "
                                  f"one may have at most {_n(MAX_KEYS)}: {ADVICE}")
                pos = colon.end()
                continue
            if top is not None and (top.role == SOURCE or (top.role == CELL and top.key in (b"source", b"input"))):
                source += j - i - 2
                if source > MAX_SOURCE_BYTES:
                    raise Refused(f"your notebook's cells hold more than {_mb(MAX_SOURCE_BYTES)} of source; a "
                                  f"notebook may hold at most {_mb(MAX_SOURCE_BYTES)}: {ADVICE}")
            pos = j
            continue
        if c == _LB or c == _LS:
            parent = top.role if top is not None else None
            key = top.key if top is not None and top.kind == _LB else None
            role = _CHILD.get((parent, key), OTHER)
            cell = top.cell if top is not None else 0
            if role == CELL:
                cells += 1
                cell = cells
                if cells > MAX_CELLS:
                    total = max(cells, _count_cells(data))
                    raise Refused(f"your notebook has {_n(total)} cells; a notebook may have at most "
                                  f"{_n(MAX_CELLS)}: {ADVICE}")
            elif role == OUTPUTS:
                cell_outputs = 0
            elif role == OUTPUT:
                cell_outputs += 1
                outputs += 1
                if cell_outputs > MAX_OUTPUTS_PER_CELL:
                    raise Refused(f"cell {cell} of your notebook has more than {_n(MAX_OUTPUTS_PER_CELL)} outputs; "
                                  f"a cell may have at most {_n(MAX_OUTPUTS_PER_CELL)}: clear its outputs and "
                                  f"hand it in again")
                if outputs > MAX_OUTPUTS:
                    raise Refused(f"your notebook has more than {_n(MAX_OUTPUTS)} outputs; a notebook may have at "
                                  f"most {_n(MAX_OUTPUTS)}: clear the outputs and hand it in again")
            stack.append(_Frame(role, c, i, cell))
            if len(stack) > MAX_DEPTH:
                raise Refused(f"your notebook's JSON is nested more than {_n(MAX_DEPTH)} levels deep"
                              f"{where(top)}; a notebook may nest at most {_n(MAX_DEPTH)}: {ADVICE}")
            pos = i + 1
            continue
        # a closing bracket
        if top is None or (c == _RB) != (top.kind == _LB):
            return                                   # not JSON here: json.loads stops at this point or before
        stack.pop()
        size = i + 1 - top.start
        if top.role == OUTPUT and size > MAX_OUTPUT_BYTES:
            raise Refused(f"an output of cell {top.cell} of your notebook is {_mb(size)}; an output may be at most "
                          f"{_mb(MAX_OUTPUT_BYTES)}: clear its outputs and hand it in again")
        if top.role == NB_META and size > MAX_METADATA_BYTES:
            raise Refused(f"your notebook's metadata is {_mb(size)}; it may be at most {_mb(MAX_METADATA_BYTES)}: "
                          f"{ADVICE}")
        if top.role == CELL_META and size > MAX_CELL_METADATA_BYTES:
            raise Refused(f"the metadata of cell {top.cell} of your notebook is {_mb(size)}; a cell's may be at most "
                          f"{_mb(MAX_CELL_METADATA_BYTES)}: {ADVICE}")
        if top.role == ATTACHMENTS and size > MAX_ATTACHMENT_BYTES:
            raise Refused(f"the attachments of cell {top.cell} of your notebook are {_mb(size)}; a cell's may be at "
                          f"most {_mb(MAX_ATTACHMENT_BYTES)}: {ADVICE}")
        pos = i + 1
        if not stack:
            return                                   # the notebook ends here; json.loads reads nothing after it
