"""What a child run produced, as the checks see it.

``Results.get(name)`` hands a check one experiment's arrays, or fails the
check with a sentence that says why there are none: the code did not load,
the class is missing, a method raised, the process timed out or exited.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

import torch

from attnkit.engine import channel
from attnkit.isolation.notebook_code import StudentCode
from attnkit.isolation.sandbox import ChildRun
from attnkit.toolkit.require import CheckFailed, require  # noqa: F401 - the checks' verdict, re-used here


# the stages the kit's own child code names (attnkit/isolation/child_runtime.py); a driver's are added by the judge
STAGES = frozenset({"setup", "returning results", "loading your definitions", "definitions", "this check"})


class KitFault(RuntimeError):
    """The grading child failed before any student code ran: a fault of the kit or the machine."""


@dataclass
class Experiment:
    meta: dict
    arrays: dict[str, torch.Tensor]

    def __getitem__(self, key) -> torch.Tensor:
        if key not in self.arrays:
            raise CheckFailed(f"the submission produced no `{key}` in this check")
        return self.arrays[key]


def _error(err, known: str = "", stage_ok=lambda stage: False) -> dict | None:
    """An error record as the checks read it, narrowed to what a page may show (attnkit/engine/channel.py):
    a type of Python's or torch's, a fixed sentence for the message naming only words of ``known`` (the
    student's source and the contract's names), a stage the driver names (``stage_ok``); anything else the child
    sent becomes a plain one. ``raw`` keeps the message for matching against the source only, never shown."""
    if err is None:
        return None
    if not isinstance(err, dict):
        return {"stage": "this check", "type": "Garbled", "line": None, "raw": "",
                "message": "wrote something the judge could not read as a result"}
    line, stage, raw = err.get("line"), err.get("stage"), err.get("message")
    kind = channel.shown_type(err.get("type"))
    message = channel.shown_message(raw, known)
    if kind in ("Killed", "Exited", "OutputLimit", "Timeout", "Garbled") and isinstance(raw, str):
        message = channel.monitor_message(raw)          # the monitor's own sentences (a fixed set)
    shown = isinstance(stage, str) and (stage in STAGES or stage_ok(stage))
    return {"stage": stage if shown else "this check", "type": kind,
            "message": message, "raw": raw[:200] if isinstance(raw, str) else "",
            "line": line if type(line) is int and 0 < line < 10**6 else None}


def at_line(line: str) -> str:
    """"; that line reads `...`" for a line of the student's source: its code, not its data. Its shape comment is
    dropped, a string's contents are elided and what is not printable ASCII dropped, so no text a submission
    carries in a literal (tests/test_covert_channel.py's payload) reaches a page through its line."""
    line = re.sub(r"\s{2,}#.*$", "", line)
    line = re.sub(r"[^\x20-\x7e]", "", re.sub(r"""(['"])(?:(?!\1).)*\1""", r"\1...\1", line))
    return f"; that line reads `{line}`" if line else ""


class Stop(NamedTuple):
    """An error that stopped every failed check: its type, its sentence, its line's text, and what a check's message
    holds when that error failed it (``explains``)."""
    type: str
    sentence: str
    line: str
    marks: tuple          # (the shown message, where it was raised): a message holding either, and the type, is it
    told: str = ""        # or, for a module-level name the grader does not bind, the sentence said instead

    def explains(self, message: str) -> bool:
        return bool(self.told and self.told in message) or (
            f"raised {self.type}" in message and any(m and m in message for m in self.marks))


class Results:
    def __init__(self, run: ChildRun, code: StudentCode, limits, plan_names=None, helpers=frozenset(),
                 public: str = "", stage_ok=lambda stage: False):
        self.code, self.run, self.limits = code, run, limits
        # the words an error's sentence may name: the student's source and the contract's public names
        err = lambda e: _error(e, f"{code.source}\n{code.target}\n{public}", stage_ok)  # noqa: E731
        known = channel.vocabulary(f"{code.source}\n{code.target}\n{public}")
        self.helpers = frozenset(helpers)       # the release's own modules beside the notebook (corpus, wordlm, ...)
        kinds = [meta.get("kind") for meta, _ in run.frames]
        if "started" not in kinds and not run.timed_out and not run.oversize:
            raise KitFault(f"the grading process failed before running any submission code "
                           f"(exit status {run.returncode}):\n{run.stderr_tail}")
        self.loaded = None
        self.begun: list[str] = []
        self.results: dict[str, tuple] = {}
        for meta, arrays in run.frames:
            kind, name = meta.get("kind"), meta.get("name")
            if kind == "loaded" and self.loaded is None:
                notes = meta.get("notes") if isinstance(meta.get("notes"), list) else []
                self.loaded = {"error": err(meta.get("error")), "notes": [err(n) for n in notes[:50]]}
            elif kind == "begin" and isinstance(name, str):
                self.begun.append(name)
            elif kind == "result" and isinstance(name, str) and name not in self.results \
                    and (plan_names is None or name in plan_names):
                clean = dict(meta, error=err(meta.get("error")),
                             meta=channel.words(meta.get("meta"), known) if isinstance(meta.get("meta"), dict) else {})
                self.results[name] = (clean, {k: torch.from_numpy(v) for k, v in arrays.items()
                                              if channel.small_shape(v.shape)})

    def _error_text(self, err: dict) -> str:
        where = self.code.where(err.get("line"))
        stage, kind, msg = err.get("stage"), err.get("type"), err.get("message")
        told = self.name_error_text(err)
        if told:
            return told
        if kind == "NotFound":                # the contract's class is missing (child_runtime.ContractMissing)
            extra = "; ".join(self.code.problems or [
                self.name_error_text(n) or
                f"a definition at {self.code.where(n.get('line'))} raised {n.get('type')}"
                + (f": {n.get('message')}" if n.get("message") else "")
                for n in self._students_notes()])
            return msg + (f" ({extra})" if extra else "")
        if kind == "Timeout":
            return f"{stage} took longer than {self.limits.seconds_per_experiment} s" + (
                f" (in {where})" if err.get("line") else "")
        if kind in ("Killed", "Exited", "OutputLimit", "Garbled"):
            when = "while loading" if stage in ("loading your definitions", "definitions") else "during this check"
            return f"{when} the submission's process {msg or 'ended'}"
        text = f"{stage} raised {kind}: {msg}" if msg else f"{stage} raised {kind}"
        return text + (f" (at {where})" if err.get("line") else "")

    def _read(self, name: str):
        return next((r for r in self.code.module_reads if r[0] == name), None)

    def name_error_text(self, err: dict) -> str | None:
        """For a NameError of a name the notebook binds at module level, what became of that binding, in one
        sentence (``notebook_slice``): it never runs (and why), or it ran and failed; None otherwise."""
        missing = re.match(r"name '(\w+)' is not defined", err.get("raw") or "") \
            if err.get("type") == "NameError" else None
        read = self._read(missing.group(1)) if missing else None
        if read is None:
            return None
        name, _, _, _, why, first, last = read
        if why:
            return self._unbound_text(read)
        note = next((n for n in (self.loaded or {}).get("notes", [])
                     if n.get("line") and first <= n["line"] <= last), None)
        if note is None:
            return None
        what = (f"took longer than {self.seconds_per_statement():g} s (the limit per statement)"
                if note.get("type") == "Timeout" else f"raised {note.get('type')}"
                + (f": {note.get('message')}" if note.get("message") else ""))
        return (f"`{self.code.target}` reads `{name}`, which {self._where(read)} binds; the grader ran that "
                f"statement and it {what}")

    @staticmethod
    def _where(read) -> str:
        _, cell, line, text, *_ = read
        return f"cell {cell}, line {line} (`{text}`)"

    def _unbound_text(self, read) -> str:
        return (f"`{self.code.target}` reads `{read[0]}`, which {self._where(read)} binds {read[4]}; the grader "
                f"does not run that statement (cells are counted from the top of the notebook, text cells "
                f"included): pass the value as an argument or define it in the class")

    def seconds_per_statement(self) -> float:
        return float(getattr(self.limits, "seconds_per_statement", 0) or self.limits.seconds_per_experiment)

    def reads_note(self) -> list[str]:
        """What a failed check's message adds when the contract reads the notebook's module level: the names,
        where they are bound, and, for those whose binding never runs, why (a sentence each)."""
        if not self.code.module_reads:
            return []
        runs = [r for r in self.code.module_reads if not r[4]]
        parts = []
        if runs:
            names = ", ".join(f"`{r[0]}`" for r in runs)
            where = "; ".join(dict.fromkeys(self._where(r) for r in runs))
            parts.append(f"`{self.code.target}` reads the notebook's module-level {names}, bound in {where}: "
                         f"every instance sees the same value, whatever arguments it is built with")
        return parts + [self._unbound_text(r) for r in self.code.module_reads if r[4]]

    def _students_notes(self) -> list[dict]:
        """The loading notes that are the student's own: a `def` or `class` that raised, an import of a module
        that is not the release's. A constant or an import that failed only because the judge keeps
        definitions (not the cell that made `vocab`) or lacks the release's helper modules is the kit's
        business, not a cause to show the student."""
        lines = self.code.source.split("\n")
        own = []
        for n in (self.loaded or {}).get("notes", []):
            line = n.get("line")
            top = next((lines[i] for i in range(min(line or 0, len(lines)) - 1, -1, -1)
                        if lines[i][:1] not in ("", " ", "\t")), "")
            if top.startswith(("class ", "def ", "async def ", "@")):
                own.append(n)
            elif top.startswith(("import ", "from ")) and n.get("type") == "ModuleNotFoundError":
                missing = re.search(r"No module named '([\w.]+)'", n.get("message") or "")
                if missing and missing.group(1).split(".")[0] not in self.helpers:
                    own.append(n)
        return own

    def _not_loaded(self) -> str | None:
        """The student's syntax error, when it is why nothing was found: every experiment looked for a class
        the notebook could not define."""
        errors = [meta.get("error") or {} for meta, _ in self.results.values()]
        if self.code.problems and errors and all(e.get("type") == "NotFound" for e in errors):
            return (f"your notebook could not be loaded: {'; '.join(self.code.problems)}, so "
                    f"{(errors[0].get('message') or 'the class the checks need was not defined')}")
        return None

    def fatal(self) -> str | None:
        """Why nothing at all could be judged, if so."""
        if self.loaded is None:
            return self._process_end("while loading your definitions")
        if self.loaded.get("error"):
            return "your definitions could not be loaded: " + self._error_text(self.loaded["error"])
        return self._not_loaded()

    def stopping_error(self, lost=()) -> Stop | None:
        """The one error that stopped the failed checks: the error every run that failed raised (one type, and one
        message or one line of the student's source: a product of the wrong shapes says another sentence at
        another length), or, where runs raised different errors, the one at one line that the most lost checks'
        messages (``lost``) name (blind set 7: a mask sliced by the batch size raises at the mask on most inputs and
        at the product on the one that fits it). None when no run raised, when no one error stopped them, or when
        it is the release's stub (the page says "not answered" for that). The line is the student's own text."""
        errors = [self.loaded["error"]] if self.loaded and self.loaded.get("error") else \
            [meta["error"] for meta, _ in self.results.values() if meta.get("error")]
        if not errors or any(e.get("message") == "not answered yet" for e in errors):
            return None
        by_message = {(e.get("type"), e.get("message")) for e in errors}
        by_line = {(e.get("type"), e.get("line")) for e in errors}
        if len(by_message) == 1 or (len(by_line) == 1 and errors[0].get("line")):
            return self._stop(errors, len(by_message) == 1, len(by_line) == 1)
        # one line's error, known by its line alone (another line may say the same sentence): the one that stopped
        # the most lost checks
        stops = [self._stop([e for e in errors if (e.get("type"), e.get("line")) == key], False, True)
                 for key in dict.fromkeys((e.get("type"), e.get("line")) for e in errors) if key[1]]
        best = max(stops, key=lambda s: sum(map(s.explains, lost)), default=None)
        return best if best and any(map(best.explains, lost)) else None

    def _stop(self, errors: list, one_message: bool, one_line: bool) -> Stop:
        first = errors[0]
        line, lines = first.get("line"), self.code.source.split("\n")
        others = sorted({e["line"] for e in errors if e.get("line") and e["line"] != line})
        also = f" (and the same error at {', '.join(self.code.where(n) for n in others[:3])})" if others else ""
        return Stop(first.get("type") or "", self._error_text(first) + also,
                    lines[line - 1].strip()[:100] if line and line <= len(lines) else "",
                    (first.get("message") if one_message else "",
                     f"(at {self.code.where(line)})" if line and one_line else ""),
                    self.name_error_text(first) or "")

    def quote(self, line) -> str:
        """" (at cell N, line M; that line reads `...`)" for line ``line`` of the assembled source a driver
        reported (an int, else nothing): where a finding showed, in the student's own code."""
        lines = self.code.source.split("\n")
        if type(line) is not int or not 0 < line <= len(lines):
            return ""
        return f" (at {self.code.where(line)}{at_line(lines[line - 1].strip()[:100])})"

    def _process_end(self, when: str) -> str:
        if self.run.oversize:
            return f"the submission's process sent back more data than allowed {when}"
        if self.run.timed_out:
            return f"the submission was stopped after the {self.limits.wall_seconds:g} s time limit {when}"
        rc = self.run.returncode
        if rc is not None and rc < 0:
            return f"the submission's process was killed by signal {-rc} {when} (memory or CPU limit, or a crash)"
        return f"the submission's process exited (status {rc}) {when}"

    def get(self, name: str, hint: str = "") -> Experiment:
        """The arrays of experiment ``name``; if it raised, fail with its error and ``hint``."""
        fatal = self.fatal()
        if fatal:
            raise CheckFailed(fatal)
        if name not in self.results:
            raise CheckFailed(self._process_end(f"during this check ({name})"))
        meta, arrays = self.results[name]
        if meta.get("error"):
            error = meta["error"]
            raise CheckFailed(self._error_text(error) + (f"; {hint}" if hint and error.get("type") != "NotFound" else ""))
        return Experiment(meta.get("meta") or {}, arrays)
