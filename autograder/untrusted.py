"""Read a submitted notebook, and the code the judge takes from it, inside limits.

The notebook is bytes the student controls, and the judge's own process is not confined. Reading it
(``json``, ``nbformat``) and parsing its code (``ast.parse``) there would let one submission take the
grader down: ``ast`` costs about 1 KiB per literal, so an 8 MB cell ``X = [1,1,1,...]`` (4 million
literals) took the judge to 3.7 GiB for 24 s, and ``a.b.b.b...`` or ``-(-(-...1))`` 100 000 deep
ends in RecursionError or MemoryError inside the parser. So both happen in a helper process forked
from the judge, under these caps:

==============  ======================================  =========================================
cap             value                                   why
==============  ======================================  =========================================
file size       64 MB (``MAX_NOTEBOOK_BYTES``, MB of     the same cap as the nbgrader path's copy
                2**20 bytes): ``stat`` before any byte   (``attnkit.safe_copy``). A notebook's bulk
                is read, then a bounded read             is its outputs (base64 figures), never
                                                         parsed as code: a 20 MB notebook of
                                                         figures reads in 0.1 s, 64 MB in 0.4 s
code size       16 MB of definition-cell text            honest definitions are kilobytes; a 3 MB
                (``MAX_CODE_BYTES``), before parsing     string literal is a generous extreme
memory          1 GiB of address space beyond the        a list of 200 000 floats (3.4 MB of code)
                judge's at the fork (``RLIMIT_AS``,      needs ~200 MiB, a 64 MB notebook well
                ``MEMORY_BUDGET_BYTES``)                 under 300 MiB; a million literals ~1 GiB
time            30 s of wall clock, then the helper is   the largest honest cases take about 1 s
                killed; as much CPU time (``SECONDS``)
reply           8-byte length + JSON over a pipe, at     JSON escapes at most sextuple a character
                most ``6 * MAX_CODE_BYTES`` (a whole     of the code; a notebook's JSON is about
                notebook: ``2 * MAX_NOTEBOOK_BYTES``)    as long as its file
==============  ======================================  =========================================

Whatever exceeds a cap is the submission's failure: ``UnreadableNotebook`` with one plain sentence
("the notebook is too large to grade (300 MB; the limit is 64 MB)", "the notebook's code is too
large or too deeply nested to grade within the memory limit", "the notebook took longer than 30 s to
read and parse (the limit)"), which ``judge.grade`` scores 0: never a crash, a hang or a fault of the
kit. Only a failure of the helper that has nothing to do with the notebook (an exception in the kit's
own code) raises RuntimeError.

Why a fork: it shares the judge's pages and imports (nbformat's validator is built once, in the
judge), and costs about 10-15 ms with torch loaded (the kernel copies the page tables of ~170 MiB),
where a fresh interpreter that imports nbformat costs 2 s. The judge does not wait for the helper's
exit (another ~15 ms of tearing down those page tables): a helper that has replied is reaped on a
later call.

The reply is plain JSON, never a pickle: the ``StudentCode`` (source, line map as runs, problems, and
``names``, every name and attribute the kept code mentions, so that no check needs to parse the
source again in the judge) or, for ``read_notebook``, the notebook as nbformat JSON. A node the
caller has already read (nbgrader's) reaches the helper through the fork itself, without a copy. The
helper closes every descriptor but its pipe, restores the default SIGINT/SIGTERM/SIGHUP, writes
nothing to the judge's streams, dumps no core and is killed if the judge dies.
"""
from __future__ import annotations

import ctypes
import gc
import io
import json
import logging
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback
import warnings

import nbformat

from .notebook_code import StudentCode, definition_cells, extract

MAX_NOTEBOOK_BYTES = 64 << 20
MAX_CODE_BYTES = 16 << 20
MEMORY_BUDGET_BYTES = 1 << 30
SECONDS = 30.0

TOO_DEEP_TO_READ = "the notebook file is too large or too deeply nested to read within the memory limit"
TOO_BIG_TO_PARSE = "the notebook's code is too large or too deeply nested to grade within the memory limit"
NOT_JSON = "the notebook file is not valid JSON (was it saved completely?)"


class UnreadableNotebook(ValueError):
    """The submission cannot be graded at all; the message is one sentence for the student."""


class _Refused(Exception):
    """Raised inside the helper: the notebook's failure, said in a sentence."""


def _mb(n: int) -> str:
    """A size as a student's file browser shows it (MB of 2**20 bytes)."""
    mb = n / (1 << 20)
    return f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB"


def too_large(size: int) -> str:
    return f"the notebook is too large to grade ({_mb(size)}; the limit is {_mb(MAX_NOTEBOOK_BYTES)})"


def code_too_large(size: int) -> str:
    return f"the notebook's code is too large to grade ({_mb(size)} of code; the limit is {_mb(MAX_CODE_BYTES)})"


def took_too_long() -> str:
    return f"the notebook took longer than {SECONDS:g} s to read and parse (the limit)"


# ---------------------------------------------------------------- what the helper does

def _read(path) -> nbformat.NotebookNode:
    with open(path, "rb") as f:
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:          # grown since the stat, or a device
        raise _Refused(too_large(len(data)))
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except nbformat.reader.NotJSONError:
        raise _Refused(NOT_JSON) from None
    except (MemoryError, RecursionError):
        raise _Refused(TOO_DEEP_TO_READ) from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is the submission's problem, said plainly
        raise _Refused(f"the notebook could not be read as a Jupyter notebook: {str(e)[:200]}") from None


def _code(nb) -> dict:
    if isinstance(nb, (str, os.PathLike)):
        nb = _read(nb)
    size = sum(len(src) for _, src in definition_cells(nb))
    if size > MAX_CODE_BYTES:
        raise _Refused(code_too_large(size))
    try:
        code = extract(nb)
    except (MemoryError, RecursionError):
        raise _Refused(TOO_BIG_TO_PARSE) from None
    runs: list[list[int]] = []                 # [cell, first line, count]: consecutive lines of one cell
    for cell, line in code.line_map:
        if runs and runs[-1][0] == cell and runs[-1][1] + runs[-1][2] == line:
            runs[-1][2] += 1
        else:
            runs.append([cell, line, 1])
    return {"source": code.source, "runs": runs, "problems": code.problems, "names": sorted(code.names)}


def _notebook(path) -> dict:
    return {"notebook": _read(path)}


# ---------------------------------------------------------------- the helper process

_libc = None
_pending: list[int] = []        # helpers that replied and may still be exiting: reaped later, never waited for


def _prctl():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _libc = False
    return _libc


def _vm_size() -> int:
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _limit(vm: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = vm + MEMORY_BUDGET_BYTES if vm else 4 * MEMORY_BUDGET_BYTES     # no /proc: a looser cap
    if soft == resource.RLIM_INFINITY or soft > want:
        resource.setrlimit(resource.RLIMIT_AS, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    cpu = int(SECONDS) + 2
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if soft == resource.RLIM_INFINITY or soft > cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu if hard == resource.RLIM_INFINITY else min(cpu, hard), hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def _helper(work, arg, r: int, w: int, vm: int, prctl, max_fd: int) -> None:
    """The forked helper's whole life: never returns into the judge's code."""
    status = 70
    try:
        os.close(r)
        os.closerange(3, w)                   # no other thread's pipe may stay open in here
        os.closerange(w + 1, max_fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if prctl:
            prctl(1, int(signal.SIGKILL))         # PR_SET_PDEATHSIG: end with the judge
        gc.disable()
        sys.stdout = sys.stderr = io.StringIO()   # nothing said here reaches the judge's streams
        logging.disable(logging.CRITICAL)
        warnings.simplefilter("ignore")
        fallback = json.dumps({"refused": TOO_BIG_TO_PARSE}).encode()
        _limit(vm)
        try:
            reply = {"ok": work(arg)}
        except _Refused as e:
            reply = {"refused": str(e)}
        except (MemoryError, RecursionError):
            reply = {"refused": TOO_BIG_TO_PARSE}
        except BaseException:  # noqa: BLE001 - the kit's own failure: say where
            reply = {"fault": traceback.format_exc()[-4000:]}
        try:
            body = json.dumps(reply, ensure_ascii=False).encode("utf-8", "surrogatepass")
        except (MemoryError, RecursionError):
            body = fallback
        del reply
        view = memoryview(struct.pack(">Q", len(body)))
        for chunk in (view, memoryview(body)):
            while chunk:
                chunk = chunk[os.write(w, chunk):]
        status = 0
    finally:
        os._exit(status)


def _reap() -> None:
    for pid in list(_pending):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done and pid in _pending:
            try:
                _pending.remove(pid)
            except ValueError:        # another thread reaped it meanwhile
                pass


def _read_exactly(r: int, n: int, deadline: float, poller) -> bytearray | None:
    """``n`` bytes from ``r``; None on EOF; TimeoutError at the deadline."""
    buf, got = bytearray(n), 0
    view = memoryview(buf)
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise TimeoutError
        k = os.readv(r, [view[got:]])
        if k == 0:
            return None
        got += k
    return buf


def _in_helper(work, arg, max_reply: int) -> dict:
    """Run ``work(arg)`` in a forked helper under the caps; its reply, or UnreadableNotebook."""
    _reap()
    prctl, vm = _prctl(), _vm_size()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    max_fd = 1 << 20 if soft == resource.RLIM_INFINITY or soft > 1 << 20 else max(soft, 1024)
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        os.close(r)
        os.close(w)
        raise RuntimeError(f"could not start the notebook reader: {e}") from None
    if pid == 0:
        _helper(work, arg, r, w, vm, prctl, max_fd)
    os.close(w)
    reply = failure = None
    try:
        poller = select.poll()
        poller.register(r, select.POLLIN)
        deadline = time.monotonic() + SECONDS
        try:
            head = _read_exactly(r, 8, deadline, poller)
            if head is not None:
                n = struct.unpack(">Q", head)[0]
                if n > max_reply:
                    failure = UnreadableNotebook(TOO_BIG_TO_PARSE)
                else:
                    body = _read_exactly(r, n, deadline, poller)
                    if body is not None:
                        reply = json.loads(body.decode("utf-8", "surrogatepass"))
        except TimeoutError:
            failure = UnreadableNotebook(took_too_long())
    finally:
        os.close(r)
    if reply is not None:
        _pending.append(pid)           # it is exiting; reaped on a later call
        _reap()
        if "fault" in reply:
            raise RuntimeError(f"the notebook reader failed (a fault of the kit):\n{reply['fault']}")
        if "refused" in reply:
            raise UnreadableNotebook(reply["refused"])
        return reply["ok"]
    if failure is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:             # reaped by someone else (SIGCHLD ignored): no status to read
        status = 0
    if failure is not None:
        raise failure
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if sig == signal.SIGXCPU:
        raise UnreadableNotebook(took_too_long())
    if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        raise RuntimeError(f"the notebook reader was interrupted (signal {sig})")
    raise UnreadableNotebook(TOO_BIG_TO_PARSE)   # died without a word (an abort, the OOM killer): out of memory


def _check_file(path) -> None:
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise UnreadableNotebook(f"the notebook could not be read as a Jupyter notebook: {str(e)[:200]}") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise UnreadableNotebook(too_large(size))


_warm = False


def _warm_validator() -> None:
    """Build nbformat's validator once here, so that no helper pays for it."""
    global _warm
    if not _warm:
        nbformat.validate(nbformat.v4.new_notebook())
        _warm = True


# ---------------------------------------------------------------- the judge's entry points

def student_code(nb) -> StudentCode:
    """The definitions the judge runs, from notebook ``nb`` (a path, or an nbformat node already read),
    read and parsed inside the caps; UnreadableNotebook when the notebook cannot be graded."""
    if isinstance(nb, (str, os.PathLike)):
        _check_file(nb)
        _warm_validator()
        nb = os.fspath(nb)
    got = _in_helper(_code, nb, 6 * MAX_CODE_BYTES + (1 << 20))
    line_map = [(cell, line + k) for cell, line, count in got["runs"] for k in range(count)]
    return StudentCode(source=got["source"], line_map=line_map, problems=list(got["problems"]),
                       names=set(got["names"]))


def read_notebook(path) -> nbformat.NotebookNode:
    """The notebook at ``path`` as an nbformat-4 node, read inside the caps; UnreadableNotebook if not."""
    _check_file(path)
    _warm_validator()
    return nbformat.from_dict(_in_helper(_notebook, os.fspath(path), 2 * MAX_NOTEBOOK_BYTES)["notebook"])
