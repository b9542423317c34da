"""What a run shows while it grades: tqdm's bar on a terminal, one plain line per submission otherwise.

A CI log or a file must not fill with the bar's carriage-return frames, so off a terminal the bar is
never drawn (tqdm's ``delay`` is infinite); tqdm still keeps the count and the clock, and each finished
submission gets one line with tqdm's rate and remaining time.
"""
from __future__ import annotations

import sys

from tqdm import tqdm

from attnkit.engine.terminal import raw, visible

BAR = "{bar:24} {n_fmt}/{total_fmt}  {rate_fmt}, ETA {remaining}  {elapsed} elapsed{postfix}"
LINE = "{rate_fmt}, ETA {remaining}"


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Bar(tqdm):
    # No monitor thread: the workers are forked from this process, and a fork must not catch another
    # thread holding a lock the child may need.
    monitor_interval = 0


class Progress:
    def __init__(self, total: int, stream=None):
        # The bar draws with carriage returns, so it gets the terminal itself (not attnkit.engine.terminal.Inert); every
        # text shown here goes through ``visible`` instead: it names students and quotes their errors.
        self.stream = raw(stream or sys.stderr)
        self.tty = _is_terminal(self.stream)
        self.bar = _Bar(total=total, file=self.stream, unit="subm", bar_format=BAR, ascii=" #",
                        dynamic_ncols=True, leave=True, delay=0 if self.tty else float("inf"))

    def finished(self, text: str) -> None:
        """One submission done; ``text`` says how it went."""
        text = visible(text)
        if self.tty:
            self.bar.set_postfix_str(f"last: {text[:120]}", refresh=False)
            self.bar.update()
        else:
            self.bar.update()
            d = self.bar.format_dict
            status = tqdm.format_meter(d["n"], d["total"], d["elapsed"], unit=d["unit"], unit_scale=True, bar_format=LINE)
            self._write(f"[{d['n']}/{d['total']}] {text}  ({status})")

    def say(self, text: str) -> None:
        """A message above the bar (or a plain line)."""
        text = "\n".join(visible(line) for line in text.split("\n"))
        if self.tty:
            self.bar.write(text, file=self.stream)
        else:
            self._write(text)

    def refresh(self) -> None:
        """Redraw the bar, so the elapsed time moves while a slow submission is graded."""
        if self.tty:
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()
