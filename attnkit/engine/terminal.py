"""Student text made inert for a terminal: every control or format character shown as its escape, never obeyed.

A student controls exception messages (which reach check results), their id (a folder name) and file names. Printed
raw into a TA's terminal, ``\\x1b]52;c;...\\x07`` writes the clipboard (OSC 52), ``\\x1b]0;...\\x07`` the window
title, ``\\x1b[2J`` clears the screen, cursor moves and ``\\r`` overwrite what was printed (a fake "score 20 / 20"),
and bidi overrides (U+202E) or zero-width characters make text read otherwise than it is. So ``visible`` replaces
every character Python does not call printable (the Unicode categories Cc, Cf, Cs, Co, Cn, Zl, Zp, and Zs but the
space: C0, DEL, C1, bidi controls, zero-width characters, U+2028/2029, ...) by its Python escape (``\\x1b``,
``\\u202e``), so a TA sees that it was there. Backslashes are left as they are: a student who types ``\\x1b`` gets
those four characters shown, which is inert too.

``visible`` is applied where student text becomes a line (tables, progress lines); ``Inert`` wraps the kit's
stdout and stderr (attnkit/cli.py), so whatever else a command prints passes through ``visible`` too.
"""
from __future__ import annotations


def _escape(c: str) -> str:
    return c.encode("unicode_escape").decode("ascii")


def visible(text, keep: str = "") -> str:
    """``text`` (str() of it) with every non-printable character but those in ``keep`` replaced by its escape."""
    text = str(text)
    if text.isprintable():                        # the common case, at C speed
        return text
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def lines(text: str) -> str:
    """``text`` for a stream of lines: newlines and tabs kept, a carriage return only right before a newline
    (CRLF, as CSV writes), every other control or format character escaped."""
    if text.isprintable():
        return text
    out = visible(text, keep="\n\t\r")
    if "\r" not in out:
        return out
    return "\r\n".join(part.replace("\r", "\\r") for part in out.split("\r\n"))


class Inert:
    """A text stream that writes ``lines(text)`` to the stream it wraps; everything else (encoding, isatty,
    fileno, buffer...) is the wrapped stream's."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(lines(text))
        return len(text)

    def writelines(self, texts) -> None:
        for t in texts:
            self.write(t)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def raw(stream):
    """The stream ``Inert`` wraps (for tqdm's bar, whose own carriage returns must reach the terminal)."""
    return stream.stream if isinstance(stream, Inert) else stream
