"""Which of a notebook's code a submission is judged on.

The judge reads definitions, not a run of the notebook: from every code cell
that is not a test cell it keeps top-level imports, ``def`` and ``class``
statements and assignments of plain constants, and, given the contract's name
(``extract(nb, target)``, as the judge does), the slice of the other module-level
statements that bind what that class or function reads (``notebook_slice``: which
statements may run and which never do, e.g. ``device = ... if
torch.cuda.is_available() else ...`` runs, a loop or ``open(...)`` never does).
Cells that plot, load data or train are left out, so an exploratory cell that fails
(or takes minutes) never costs a student a point, and the order of statements is the
notebook's order, so the last definition of the student's class wins exactly as it
would in Jupyter. Imports are hoisted to the top, so a notebook whose cells were
moved still loads. ``StudentCode.module_reads`` lists the module-level values the
target reads and every needed name whose binding never runs, with where and why,
so the judge can say so in a sentence rather than a NameError. Cells are numbered
by their position among all the notebook's cells (text cells included), 1-based.

IPython syntax in a definitions cell costs nothing: line magics (``%matplotlib
inline``, ``res = %timeit -o f()``), shell lines (``!pip install ...``,
``files = !ls``), help (``obj?``, ``??obj``) and a cell magic on the first line.
Each cell is parsed as Python first, so Python that merely contains a ``%``
(``"%d" % x``, a modulo, a ``%`` line inside a triple-quoted string) is never
touched. Only when the parse fails *at* a line that is such IPython syntax is
that line replaced by ``pass`` (same indentation, same line numbers) and the
cell parsed again, once per such line; a genuine syntax error is reported as
"syntax error in cell N at line L: msg". A cell magic whose body is Python
(``%%time``, ``%%capture``, ...) loses only its first line; the body of any
other (``%%bash``, ``%%writefile``, ...) is not Python, and the cell is skipped.
IPython itself is not needed (it is not installed where grading runs).

``extract`` parses untrusted text: the judge calls it only inside limits
(``attnkit.isolation.untrusted``). A cell too large or too deeply nested for the
parser raises MemoryError or RecursionError, which the caller turns into the
submission's failure.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from attnkit.isolation.notebook_slice import Slice, Stmt, _start, scope_tables, slice_for

# Calls allowed inside a kept assignment: pure, cheap, and common in constants.
SAFE_CALLS = {"float", "int", "bool", "str", "tuple", "list", "dict", "set", "frozenset",
              "range", "len", "abs", "min", "max", "round", "pow"}
SAFE_MODULES = {"math"}

# Cell magics whose body is Python run in the kernel's namespace; any other cell magic's body is not Python.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
QUOTE_CHARS = 60                  # of a statement's first line, quoted back to the student
MAX_IPYTHON_LINES = 1000          # lines replaced per cell before its syntax error is reported as it is

_NEWLINE = re.compile(r"\r\n|\r|\n")     # Python's line breaks (str.splitlines also splits on \f, \x1c, \u2028, ...)
_CELL_MAGIC = re.compile(r"\s*%%(\w*)")
_IPYTHON_LINE = re.compile(r"""\s*(?:
      [%!]                                              # %magic ..., %%magic, !shell ...
    | [\w.]+(?:\s*,\s*[\w.]+)*\s*=\s*[%!]               # res = %timeit -o f(), files = !ls, a, b = !cmd
    | %{0,2}[\w.*]+\s*\?\??\s*$                         # obj?, obj??, np.*load*?, %timeit?
    | \?\??\s*%{0,2}[\w.*]+\s*$                         # ?obj, ??obj
)""", re.X)


@dataclass
class StudentCode:
    source: str = ""
    line_map: list[tuple[int, int]] = field(default_factory=list)   # assembled line -> (cell, line)
    problems: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)   # every name and attribute the kept code takes from
    # outside itself: names it uses or imports, less those it defines (its own functions, classes,
    # arguments and variables), so a helper of the student's own that shares a library's name is its own
    target: str = ""                               # the contract's name the code was sliced for
    module_reads: list = field(default_factory=list)   # [name, cell, line, first line's text, why it never
    # runs ("" when it runs), first and last line of the statement in ``source`` (0, 0 when not in it)]: the
    # notebook's module-level values the target reads, and every name it needs whose binding never runs

    def where(self, line: int | None) -> str:
        if line and 0 < line <= len(self.line_map):
            cell, l = self.line_map[line - 1]
            return f"cell {cell}, line {l}"
        return "your code"


def _is_test_cell(cell) -> bool:
    meta = cell.get("metadata")
    nb = meta.get("nbgrader") if isinstance(meta, Mapping) else None
    return isinstance(nb, Mapping) and bool(nb.get("grade")) and not nb.get("solution")


def cell_source(cell) -> str:
    """A cell's source as one string (nbformat allows a list of lines); anything else reads as empty."""
    src = cell.get("source", "")
    if isinstance(src, list):
        return "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def definition_cells(nb):
    """(cell number, source) of every code cell the judge reads, in notebook order."""
    cells = nb.get("cells") if isinstance(nb, Mapping) else None
    for cell_no, cell in enumerate(cells if isinstance(cells, list) else [], start=1):
        if isinstance(cell, Mapping) and cell.get("cell_type") == "code" and not _is_test_cell(cell):
            yield cell_no, cell_source(cell)


def _blank_ipython_line(lines: list[str], i: int) -> None:
    """Line ``i`` (0-based) is IPython syntax: make it ``pass``, and its backslash continuations empty."""
    line = lines[i]
    lines[i] = line[:len(line) - len(line.lstrip())] + "pass"
    while line.rstrip().endswith("\\") and i + 1 < len(lines):
        i += 1
        line, lines[i] = lines[i], ""


def parse_cell(src: str) -> tuple[ast.Module | None, list[str] | None, SyntaxError | None]:
    """(tree, lines the tree was parsed from, None), or (None, None, the syntax error); (None, None, None)
    for a cell whose body is not Python."""
    lines = _NEWLINE.split(src)
    first = next((i for i, l in enumerate(lines) if l.strip()), None)
    magic = _CELL_MAGIC.match(lines[first]) if first is not None else None
    if magic:
        if magic.group(1) not in PYTHON_CELL_MAGICS:
            return None, None, None
        lines[first] = ""
    for _ in range(MAX_IPYTHON_LINES + 1):
        try:
            return ast.parse("\n".join(lines)), lines, None
        except SyntaxError as e:
            error, n = e, e.lineno
        if not (n and 0 < n <= len(lines) and _IPYTHON_LINE.match(lines[n - 1])):
            break
        _blank_ipython_line(lines, n - 1)
    return None, None, error


def _constant_like(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            ok = (isinstance(f, ast.Name) and f.id in SAFE_CALLS) or (
                isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in SAFE_MODULES)
            if not ok:
                return False
        elif isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom,
                              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return False
    return True


def _kept(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
        return False
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, ast.Name) for t in stmt.targets) and _constant_like(stmt.value)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.value is not None and _constant_like(stmt.value)
    return False


def _names(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names and attributes ``stmt`` uses or imports, names it binds itself)."""
    used, own = set(), set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.Attribute):
            used.add(n.attr)
        elif isinstance(n, ast.Name):
            (used if isinstance(n.ctx, ast.Load) else own).add(n.id)
        elif isinstance(n, ast.alias):                    # import torch.x.y as z: y is torch's, z the student's
            used.update(n.name.split("."))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, ast.arg):
            own.add(n.arg)
    return used, own


def extract(nb, target: str | None = None) -> StudentCode:
    """Assemble the code of notebook ``nb`` (an nbformat node or plain dict) the judge runs for ``target``."""
    return extract_cells(definition_cells(nb), target)


def _first_line(lines: list[str], stmt: ast.stmt, start: int) -> str:
    text = lines[stmt.lineno - 1].strip() if stmt.lineno <= len(lines) else ""
    more = stmt.end_lineno > stmt.lineno or len(text) > QUOTE_CHARS
    return (text[:QUOTE_CHARS] + " ...") if more else text


def extract_cells(cells, target: str | None = None) -> StudentCode:
    """Assemble the code of ``cells`` ((cell number, source) of a notebook's definition cells) the judge runs:
    imports (hoisted), definitions and literal constants, and, with ``target`` (the contract's name), the
    slice of the other statements that bind what it reads (``notebook_slice``)."""
    out = StudentCode(target=target or "")
    stmts: list[Stmt] = []
    cell_lines_of: list[list[str]] = []
    for cell_no, src in cells:
        try:
            tree, cell_lines, error = parse_cell(src)
        except ValueError as e:   # e.g. a lone surrogate ("\ud800") the parser cannot encode
            out.problems.append(f"syntax error in cell {cell_no}: the cell holds text that is not valid Unicode "
                                f"({type(e).__name__})")
            continue
        if error is not None:
            at = f" at line {error.lineno}" if error.lineno else ""
            out.problems.append(f"syntax error in cell {cell_no}{at}: {error.msg}")
            continue
        if tree is None:
            continue
        tables = scope_tables("\n".join(cell_lines)) if target else []
        for stmt in tree.body:
            start = _start(stmt)
            inside = None if tables is None else [t for t in tables if start <= t.get_lineno() <= stmt.end_lineno]
            stmts.append(Stmt(cell_no, start, stmt, _first_line(cell_lines, stmt, start), inside))
            cell_lines_of.append(cell_lines)
    kept = [_kept(s.node) for s in stmts]
    sliced = slice_for(stmts, target, [k and not _is_import(s.node) for k, s in zip(kept, stmts)]) if target else Slice()
    run = [(k or i in sliced.keep) and i not in sliced.drop for i, k in enumerate(kept)]
    imports: list[tuple[str, tuple[int, int]]] = []      # hoisted: cells run out of order still import first
    rest: list[tuple[str, tuple[int, int]]] = []
    span: dict[int, tuple[int, int]] = {}                 # statement -> its rest lines (0-based, end excluded)
    defined: set[str] = set()
    for i, stmt in enumerate(stmts):
        if not run[i]:
            continue
        node, lines = stmt.node, cell_lines_of[i]
        dest = imports if _is_import(node) else rest
        span[i] = (len(rest), len(rest) + node.end_lineno - stmt.line + 1)
        dest.extend((lines[l - 1], (stmt.cell, l)) for l in range(stmt.line, node.end_lineno + 1))
        used, own = _names(node)
        out.names |= used
        defined |= own
    out.names -= defined
    out.source = "\n".join(line for line, _ in imports + rest) + "\n"
    out.line_map = [where for _, where in imports + rest]
    entries = {name: (i, "") for name, i in sliced.reads.items()}
    entries.update(sliced.unbound)
    for name, (i, why) in sorted(entries.items()):
        first, last = span.get(i, (-1, -1))
        out.module_reads.append([name, stmts[i].cell, stmts[i].line, stmts[i].text, why,
                                 first + len(imports) + 1 if first >= 0 else 0, last + len(imports) if first >= 0 else 0])
    return out


def _is_import(node) -> bool:
    return isinstance(node, (ast.Import, ast.ImportFrom))
