"""Which of a notebook's code a submission is judged on.

The judge reads definitions, not a run of the notebook: from every code cell
that is not a test cell it keeps top-level imports, ``def`` and ``class``
statements and assignments of plain constants. Cells that plot, load data or
train are left out, so an exploratory cell that fails (or takes minutes) never
costs a student a point, and the order of definitions is the notebook's order,
so the last ``class Head`` wins exactly as it would in Jupyter. Imports are
hoisted to the top, so a notebook whose cells were moved still loads.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

# Calls allowed inside a kept assignment: pure, cheap, and common in constants.
SAFE_CALLS = {"float", "int", "bool", "str", "tuple", "list", "dict", "set", "frozenset",
              "range", "len", "abs", "min", "max", "round", "pow"}
SAFE_MODULES = {"math"}


@dataclass
class StudentCode:
    source: str = ""
    line_map: list[tuple[int, int]] = field(default_factory=list)   # assembled line -> (cell, line)
    problems: list[str] = field(default_factory=list)

    def where(self, line: int | None) -> str:
        if line and 0 < line <= len(self.line_map):
            cell, l = self.line_map[line - 1]
            return f"cell {cell}, line {l}"
        return "your code"


def _is_test_cell(cell) -> bool:
    nb = cell.get("metadata", {}).get("nbgrader", {})
    return bool(nb.get("grade")) and not nb.get("solution")


def _without_magics(src: str) -> str:
    return "\n".join("# " + l if l.lstrip().startswith(("%", "!")) else l for l in src.splitlines())


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


def extract(nb) -> StudentCode:
    """Assemble the definitions of notebook ``nb`` (an nbformat node or plain dict)."""
    out = StudentCode()
    imports: list[tuple[str, tuple[int, int]]] = []      # hoisted: cells run out of order still import first
    rest: list[tuple[str, tuple[int, int]]] = []
    for cell_no, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code" or _is_test_cell(cell):
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        src = _without_magics(src)
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            out.problems.append(f"syntax error in cell {cell_no} at line {e.lineno}: {e.msg}")
            continue
        cell_lines = src.splitlines()
        for stmt in tree.body:
            if not _kept(stmt):
                continue
            start = stmt.decorator_list[0].lineno if getattr(stmt, "decorator_list", None) else stmt.lineno
            dest = imports if isinstance(stmt, (ast.Import, ast.ImportFrom)) else rest
            dest.extend((cell_lines[l - 1], (cell_no, l)) for l in range(start, stmt.end_lineno + 1))
    out.source = "\n".join(line for line, _ in imports + rest) + "\n"
    out.line_map = [where for _, where in imports + rest]
    return out
