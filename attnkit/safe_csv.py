"""CSV a spreadsheet opens as data, never as formulas: every CSV the kit writes goes through ``to_csv``.

Excel, LibreOffice and Google Sheets read a field that starts with ``=``, ``+``, ``-`` or ``@`` as a formula
(``=HYPERLINK(...)`` makes a link, ``=1+2`` shows 3), and a leading tab or carriage return can hide one.
Student ids, names and exception messages reach the kit's CSV files, so such a field is neutralised as
OWASP's "CSV Injection" page recommends: a single quote goes in front, so the spreadsheet shows the text
(quote included) and evaluates nothing. A field that is just a number (``-3``, ``+1.5``, ``2e-05``) starts
no formula and is left alone, so negative scores still import as numbers. Quotes and commas inside a field
are the csv module's business (it quotes the field).

Control and format characters (ESC, BEL, C1, bidi overrides, zero-width characters, a carriage return) are
written as their escapes (``\\x1b``, ``\\u202e``; attnkit/engine/terminal.py), so a CSV read in a terminal (``cat``,
``attnkit export`` to stdout) obeys none of them and a spreadsheet shows that they were there; a newline stays
(the csv module quotes the field).
"""
from __future__ import annotations

import csv
import io
import re
from typing import Iterable

from attnkit.engine.terminal import visible

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def cell(value) -> str:
    """``value`` as a field no spreadsheet evaluates (a leading ``'`` when it would start a formula) and no
    terminal obeys (control and format characters as their escapes)."""
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_START) and not NUMBER.fullmatch(text):
        text = "'" + text
    return visible(text, keep="\n")


def to_csv(rows: Iterable[Iterable], lineterminator: str = "\r\n") -> str:
    """The rows (header included) as CSV text, every field through ``cell``."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator=lineterminator)
    out.writerows([cell(v) for v in row] for row in rows)
    return buf.getvalue()
