"""Read a submitted notebook, and the code the judge takes from it, inside limits.

The notebook is bytes the student controls, and the judge's own process is not confined. Reading it
(``json``, ``nbformat``) and parsing its code (``ast.parse``) there would let one submission take the
grader down: ``ast`` costs about 1 KiB per literal, so an 8 MB cell ``X = [1,1,1,...]`` (4 million
literals) took the judge to 3.7 GiB for 24 s, and ``a.b.b.b...`` or ``-(-(-...1))`` 100 000 deep
ends in RecursionError or MemoryError inside the parser. So both happen in another process, under
these caps:

==============  ======================================  =========================================
cap             value                                   why
==============  ======================================  =========================================
file size       64 MB (``MAX_NOTEBOOK_BYTES``, MB of     the same cap as the nbgrader path's copy
                2**20 bytes): ``stat`` before any byte   (``attnkit.isolation.files``). A notebook's bulk
                is read, then a bounded read             is its outputs (base64 figures), never
                                                         parsed as code: a 20 MB notebook of
                                                         figures reads in 0.1 s, 64 MB in 0.4 s
shape           cells, JSON depth, values, keys,         nbformat costs per value, not per
                sizes of source, outputs, metadata       byte: 400,000 empty cells (26 MB) took
                (``notebook_shape``), on the bytes       377 s and 3.4 GiB; refused from the
                before nbformat reads them               bytes in ~1 s
code size       16 MB of definition-cell text            honest definitions are kilobytes; a 3 MB
                (``MAX_CODE_BYTES``), before parsing     string literal is a generous extreme
memory          1 GiB of address space beyond the        a list of 200 000 floats (3.4 MB of code)
                process's own at the start of the        needs ~200 MiB, a 64 MB notebook well
                request (``RLIMIT_AS``,                  under 300 MiB; a million literals ~1 GiB
                ``MEMORY_BUDGET_BYTES``)
time            30 s of wall clock, then the process     the largest honest cases take about 1 s
                is killed; as much CPU time
                (``SECONDS``)
reply           8-byte length + JSON over a pipe, at     JSON escapes at most sextuple a character
                most ``6 * MAX_CODE_BYTES`` (a whole     of the code; a notebook's JSON is about
                notebook: ``2 * MAX_NOTEBOOK_BYTES``)    as long as its file
==============  ======================================  =========================================

Whatever exceeds a cap is the submission's failure: ``UnreadableNotebook`` with one plain sentence
("the notebook is too large to grade (300 MB; the limit is 64 MB)", "the notebook's code is too
large or too deeply nested to grade within the memory limit", "the notebook took longer than 30 s to
read and parse (the limit)"), which ``judge.grade`` scores 0: never a crash, a hang or a fault of the
kit. Only a failure that has nothing to do with the notebook (an exception in the kit's own code)
raises RuntimeError.

Two routes, the same caps and the same answer:

- **A notebook file** is read and parsed in a helper forked from the judge for that one request. The
  fork shares the judge's imports (nbformat's validator is built once, in the judge) where a fresh
  interpreter that imports nbformat costs 2 s; it costs 10-15 ms with torch loaded (the kernel
  copies the page tables of ~170 MiB), and ~15 ms more to tear them down at its exit, which the judge
  does not wait for (a helper that has replied is reaped on a later call). Files are graded one per
  process (``attnkit grade``, Gradescope), where that is nothing beside importing torch.
- **An nbformat node already read** (nbgrader's: ``attnkit autograde``, ``nbgrader autograde``,
  ``selfcheck``, many submissions per process) goes to the *reader*: a ``python -I -S`` of the
  standard library and ``notebook_code`` only (no torch, no nbformat: ~15 MiB, started once per
  process in ~50 ms), which parses one request at a time under the caps, set afresh per request. The
  judge sends it the definition cells' text (the code-size cap is checked before) and pays about a
  millisecond over parsing in its own process. A reader that refused a notebook (or grew by more than
  a quarter of the memory budget) exits after its reply, so the next request gets a fresh one; one
  that does not answer in time is killed (the notebook took too long). While another thread of the
  judge holds the reader, wherever it cannot start, and when it does not take its request in time or
  exits without a word (a failure of its own, not the notebook's), the node takes the first route.

The reply is plain JSON, never a pickle: the ``StudentCode`` (source, line map as runs, problems, and
``names``, every name and attribute the kept code mentions, so that no check needs to parse the
source again in the judge) or, for ``read_notebook``, the notebook as nbformat JSON. The forked
helper closes every descriptor but its pipe, restores the default SIGINT/SIGTERM/SIGHUP, writes
nothing to the judge's streams, dumps no core and is killed if the judge dies; the reader has its own
session, no descriptor of the judge's but its two pipes, and ends when the judge closes them.
"""
from __future__ import annotations

import gc
import io
import json
import logging
import math
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

from attnkit.isolation.notebook_code import StudentCode, definition_cells, extract_cells
from attnkit import KIT_SOURCE
from attnkit.isolation import framing, linux, notebook_shape

MAX_NOTEBOOK_BYTES = 64 << 20
MAX_CODE_BYTES = 16 << 20
MEMORY_BUDGET_BYTES = 1 << 30
SECONDS = 30.0
USE_READER = True                 # nodes go to the reader (False: every request forks a helper)

TOO_DEEP_TO_READ = "the notebook file is too large or too deeply nested to read within the memory limit"
TOO_BIG_TO_PARSE = "the notebook's code is too large or too deeply nested to grade within the memory limit"
NOT_JSON = "the notebook file is not valid JSON (was it saved completely?)"


class UnreadableNotebook(ValueError):
    """The submission cannot be graded at all; the message is one sentence for the student."""


class _Refused(Exception):
    """Raised where the notebook is read: the notebook's failure, said in a sentence."""


def _mb(n: int) -> str:
    """A size as a student's file browser shows it (MB of 2**20 bytes)."""
    mb = n / (1 << 20)
    return f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB"


def too_large(size: int) -> str:
    return f"the notebook is too large to grade ({_mb(size)}; the limit is {_mb(MAX_NOTEBOOK_BYTES)})"


def code_too_large(size: int, limit: int | None = None) -> str:
    return (f"the notebook's code is too large to grade ({_mb(size)} of code; "
            f"the limit is {_mb(MAX_CODE_BYTES if limit is None else limit)})")


def took_too_long(seconds: float | None = None) -> str:
    return f"the notebook took longer than {SECONDS if seconds is None else seconds:g} s to read and parse (the limit)"


# ---------------------------------------------------------------- the work, wherever it runs

NOT_A_FILE = "the notebook is not a regular file (a pipe, a device or a folder): hand in the .ipynb file itself"


def _read(path):
    import nbformat
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)    # never blocks: a FIFO swapped in after the check
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _Refused(NOT_A_FILE)
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:          # grown since the stat, or a device
        raise _Refused(too_large(len(data)))
    try:                                        # cells, depth, sizes: capped before nbformat builds anything
        notebook_shape.check(data)
    except notebook_shape.Refused as e:
        raise _Refused(str(e)) from None
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except nbformat.reader.NotJSONError:
        raise _Refused(NOT_JSON) from None
    except (MemoryError, RecursionError):
        raise _Refused(TOO_DEEP_TO_READ) from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is the submission's problem, said plainly
        raise _Refused(f"the notebook could not be read as a Jupyter notebook: {str(e)[:200]}") from None


def _code_size(cells) -> int:
    return sum(len(src) for _, src in cells)


def _code_reply(cells, max_code: int = MAX_CODE_BYTES, target: str | None = None) -> dict:
    """The StudentCode of ``cells`` ((cell number, source) pairs) as plain JSON data."""
    size = _code_size(cells)
    if size > max_code:
        raise _Refused(code_too_large(size, max_code))
    try:
        code = extract_cells(cells, target)
    except (MemoryError, RecursionError):
        raise _Refused(TOO_BIG_TO_PARSE) from None
    runs: list[list[int]] = []                 # [cell, first line, count]: consecutive lines of one cell
    for cell, line in code.line_map:
        if runs and runs[-1][0] == cell and runs[-1][1] + runs[-1][2] == line:
            runs[-1][2] += 1
        else:
            runs.append([cell, line, 1])
    return {"source": code.source, "runs": runs, "problems": code.problems, "names": sorted(code.names),
            "target": code.target, "module_reads": code.module_reads}


def _code_of(arg) -> dict:
    nb, target = arg
    if isinstance(nb, (str, os.PathLike)):
        nb = _read(nb)
    return _code_reply(list(definition_cells(nb)), MAX_CODE_BYTES, target)


def _notebook(path) -> dict:
    return {"notebook": _read(path)}


def _student_code(got: dict) -> StudentCode:
    line_map = [(cell, line + k) for cell, line, count in got["runs"] for k in range(count)]
    return StudentCode(source=got["source"], line_map=line_map, problems=list(got["problems"]),
                       names=set(got["names"]), target=got.get("target") or "",
                       module_reads=[list(r) for r in got.get("module_reads", [])])


# ---------------------------------------------------------------- limits and the wire

def _vm_size() -> int:
    """This process's address space in bytes (0 when unknown), read from /proc rather than with psutil: the
    reader runs as ``python -I -S``, without the site-packages psutil lives in."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


_GIVEN = {which: resource.getrlimit(which)[0] for which in (resource.RLIMIT_AS, resource.RLIMIT_CPU)}


def _lower(which: int, value: int) -> None:
    """Set the soft limit ``which`` to ``value``, never above the hard limit nor above the soft limit the
    process was given (the reader raises again, for its next request, a cap it lowered for the last)."""
    hard = resource.getrlimit(which)[1]
    for ceiling in (hard, _GIVEN.get(which, resource.RLIM_INFINITY)):
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
    resource.setrlimit(which, (value, hard))


def _limit(budget: int, seconds: float) -> None:
    """Caps for one request: ``budget`` bytes of address space beyond the current, ``seconds`` of CPU."""
    vm = _vm_size()
    _lower(resource.RLIMIT_AS, vm + budget if vm else 4 * budget)        # no /proc: a looser cap
    used = resource.getrusage(resource.RUSAGE_SELF)
    _lower(resource.RLIMIT_CPU, math.ceil(used.ru_utime + used.ru_stime + seconds) + 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def _encode(reply: dict, fallback: bytes) -> bytes:
    try:
        body = json.dumps(reply, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except (MemoryError, RecursionError):
        body = fallback
    return framing.LENGTH.pack(len(body)) + body


def _write_all(fd: int, data: bytes, deadline: float | None = None) -> None:
    """All of ``data`` to ``fd``; with a deadline, ``fd`` is non-blocking and TimeoutError ends the wait."""
    view = memoryview(data)
    poller = None
    if deadline is not None:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
    while view:
        if poller is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            pass


def _read_exactly(fd: int, n: int, deadline: float | None, poller=None) -> bytearray | None:
    """``n`` bytes from ``fd``; None on EOF; TimeoutError at the deadline (None: wait for ever)."""
    buf, got = bytearray(n), 0
    view = memoryview(buf)
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError
        k = os.readv(fd, [view[got:]])
        if k == 0:
            return None
        got += k
    return buf


class _ReplyTooLong(Exception):
    pass


def _receive(fd: int, deadline: float | None, max_reply: int) -> dict | None:
    poller = None
    if deadline is not None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
    head = _read_exactly(fd, 8, deadline, poller)
    if head is None:
        return None
    n = framing.LENGTH.unpack(head)[0]
    if n > max_reply:
        raise _ReplyTooLong
    body = _read_exactly(fd, n, deadline, poller)
    return None if body is None else json.loads(body.decode("utf-8", "surrogatepass"))


def _answer(reply: dict) -> dict:
    if "fault" in reply:
        raise RuntimeError(f"the notebook reader failed (a fault of the kit):\n{reply['fault']}")
    if "refused" in reply:
        raise UnreadableNotebook(reply["refused"])
    return reply["ok"]


def _run(work, arg) -> tuple[dict, bool]:
    """(the reply to ``work(arg)``, whether the process that ran it is still fit for another request)."""
    try:
        return {"ok": work(arg)}, True
    except _Refused as e:
        return {"refused": str(e)}, False
    except (MemoryError, RecursionError):
        return {"refused": TOO_BIG_TO_PARSE}, False
    except BaseException:  # noqa: BLE001 - the kit's own failure: say where
        return {"fault": traceback.format_exc()[-4000:]}, False


_FALLBACK = json.dumps({"refused": TOO_BIG_TO_PARSE}).encode()


def _quiet() -> None:
    """Nothing said in here reaches the judge's streams (or takes a lock another thread of it held)."""
    sys.stdout = sys.stderr = io.StringIO()
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")


# ---------------------------------------------------------------- route 1: a helper forked per request

_pending: list[int] = []        # helpers that replied and may still be exiting: reaped later, never waited for


def _helper(work, arg, r: int, w: int, max_fd: int) -> None:
    """The forked helper's whole life: never returns into the judge's code."""
    status = 70
    try:
        os.close(r)
        os.closerange(3, w)                   # no other thread's pipe may stay open in here
        os.closerange(w + 1, max_fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        linux.die_with_parent(signal.SIGKILL)     # end with the judge
        gc.disable()
        _quiet()
        _limit(MEMORY_BUDGET_BYTES, SECONDS)
        reply, _ = _run(work, arg)
        data = _encode(reply, _FALLBACK)
        del reply
        _write_all(w, data)
        status = 0
    finally:
        os._exit(status)


def _reap() -> None:
    for pid in list(_pending):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            try:
                _pending.remove(pid)
            except ValueError:        # another thread reaped it meanwhile
                pass


def _in_helper(work, arg, max_reply: int) -> dict:
    """Run ``work(arg)`` in a forked helper under the caps; its answer, or UnreadableNotebook."""
    _reap()
    linux.libc()                                  # loaded before the fork, not in the helper
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
        _helper(work, arg, r, w, max_fd)
    os.close(w)
    reply = failure = None
    try:
        reply = _receive(r, time.monotonic() + SECONDS, max_reply)
    except TimeoutError:
        failure = UnreadableNotebook(took_too_long())
    except _ReplyTooLong:
        failure = UnreadableNotebook(TOO_BIG_TO_PARSE)
    finally:
        os.close(r)
    if reply is not None:
        _pending.append(pid)           # it is exiting; reaped on a later call
        _reap()
        return _answer(reply)
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
    if os.WIFSIGNALED(status):
        _died(-os.WTERMSIG(status))
    _died(os.WEXITSTATUS(status))


def _died(returncode: int):
    """The process reading a notebook ended without an answer: say why."""
    if returncode == -signal.SIGXCPU:
        raise UnreadableNotebook(took_too_long())
    if returncode in (-signal.SIGINT, -signal.SIGTERM, -signal.SIGHUP):
        raise RuntimeError(f"the notebook reader was interrupted (signal {-returncode})")
    raise UnreadableNotebook(TOO_BIG_TO_PARSE)   # an abort, the OOM killer: out of memory inside the parser


# ---------------------------------------------------------------- route 2: the reader

_READER_BOOT = "import sys\nsys.path.insert(0, sys.argv[1])\nfrom attnkit.isolation.untrusted import serve\nserve()\n"
_reader: subprocess.Popen | None = None
_reader_owner = 0
_reader_lock = threading.Lock()
_retired: list[subprocess.Popen] = []          # readers that said goodbye, reaped when they are gone


def serve() -> None:
    """The reader's loop (in a ``python -I -S``): a request on fd 0, its reply on fd 1, until EOF."""
    inp, out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()                           # parses make no cycles; a reader that grows is replaced
    _quiet()
    start = _vm_size()
    while True:
        request = _receive(inp, None, 1 << 40)
        if request is None:
            return
        budget, seconds = int(request["budget"]), float(request["seconds"])
        _limit(budget, seconds)
        cells = [(int(n), src) for n, src in request["cells"]]
        reply, fit = _run(lambda c: _code_reply(c, int(request["max_code"]), request.get("target")), cells)
        del cells, request
        fit = fit and _vm_size() < start + budget // 4
        if not fit:
            reply["bye"] = True
        _write_all(out, _encode(reply, json.dumps({"refused": TOO_BIG_TO_PARSE, "bye": True}).encode()))
        if not fit:
            return


def _forget_reader() -> None:                    # in a forked child: the reader is the parent's
    global _reader, _reader_owner, _reader_lock, _retired
    _reader, _reader_owner, _reader_lock, _retired = None, 0, threading.Lock(), []


os.register_at_fork(after_in_child=_forget_reader)


def _start_reader() -> subprocess.Popen | None:
    global _reader, _reader_owner
    try:
        _reader = subprocess.Popen([sys.executable, "-I", "-S", "-B", "-c", _READER_BOOT,   # -B: never writes the kit's __pycache__
                                    str(KIT_SOURCE)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   bufsize=0, close_fds=True, start_new_session=True)
    except OSError:
        _reader = None
        return None
    os.set_blocking(_reader.stdin.fileno(), False)      # a request is written against the deadline
    _reader_owner = os.getpid()
    return _reader


def _retire_reader(kill: bool = False) -> int | None:
    """Let go of the reader (killed first if ``kill``); its exit status when it has one already."""
    global _reader
    proc, _reader = _reader, None
    if proc is None:
        return None
    for f in (proc.stdin, proc.stdout):
        try:
            f.close()
        except OSError:
            pass
    if kill:
        proc.kill()
        proc.wait()
    if proc.poll() is None:
        _retired.append(proc)
    return proc.returncode


def _via_reader(cells: list, max_reply: int, target: str | None = None) -> dict | None:
    """The reader's answer for ``cells``; None when it is busy with another thread or cannot start."""
    if not _reader_lock.acquire(blocking=False):
        return None
    try:
        _retired[:] = [p for p in _retired if p.poll() is None]
        request = _encode({"cells": cells, "budget": MEMORY_BUDGET_BYTES, "seconds": SECONDS,
                           "max_code": MAX_CODE_BYTES, "target": target}, b"")
        deadline = time.monotonic() + SECONDS
        for _ in range(2):                 # a reader that died while idle is replaced once
            proc = _reader if _reader is not None and _reader_owner == os.getpid() else _start_reader()
            if proc is None:
                return None
            try:
                _write_all(proc.stdin.fileno(), request, deadline)
                break
            except OSError:
                _retire_reader(kill=True)
            except TimeoutError:           # a reader that does not read: not the notebook's doing
                _retire_reader(kill=True)
                return None
        else:
            return None
        try:
            reply = _receive(proc.stdout.fileno(), deadline, max_reply)
        except TimeoutError:
            _retire_reader(kill=True)
            raise UnreadableNotebook(took_too_long()) from None
        except _ReplyTooLong:
            _retire_reader(kill=True)
            raise UnreadableNotebook(TOO_BIG_TO_PARSE) from None
        if reply is None:                  # it died on this request
            _retire_reader()
            returncode = proc.wait()
            if returncode >= 0:            # it exited, i.e. failed in its own code: the fork route will tell
                return None
            _died(returncode)
        if reply.pop("bye", False):
            _retire_reader()
        return reply
    finally:
        _reader_lock.release()


# ---------------------------------------------------------------- the judge's entry points

def _check_file(path) -> None:
    try:
        st = os.stat(path)
    except OSError as e:
        raise UnreadableNotebook(f"the notebook could not be read as a Jupyter notebook: {str(e)[:200]}") from None
    if not stat.S_ISREG(st.st_mode):              # a FIFO would block the reader, a device never end
        raise UnreadableNotebook(NOT_A_FILE)
    size = st.st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise UnreadableNotebook(too_large(size))


_warm = False


def _warm_validator() -> None:
    """Build nbformat's validator once here, so that no helper pays for it."""
    global _warm
    if not _warm:
        import nbformat
        nbformat.validate(nbformat.v4.new_notebook())
        _warm = True


_MAX_CODE_REPLY = 6 * MAX_CODE_BYTES + (1 << 20)


def student_code(nb, target: str | None = None) -> StudentCode:
    """The code the judge runs for ``target`` (the contract's name; None: definitions and constants only), from
    notebook ``nb`` (a path, or an nbformat node already read), read and parsed inside the caps;
    UnreadableNotebook when the notebook cannot be graded."""
    if isinstance(nb, (str, os.PathLike)):
        _check_file(nb)
        _warm_validator()
        return _student_code(_in_helper(_code_of, (os.fspath(nb), target), _MAX_CODE_REPLY))
    if USE_READER:
        cells = list(definition_cells(nb))      # walking the node parses nothing
        size = _code_size(cells)
        if size > MAX_CODE_BYTES:
            raise UnreadableNotebook(code_too_large(size))
        reply = _via_reader(cells, _MAX_CODE_REPLY, target)
        if reply is not None:
            return _student_code(_answer(reply))
    return _student_code(_in_helper(_code_of, (nb, target), _MAX_CODE_REPLY))


def read_notebook(path):
    """The notebook at ``path`` as an nbformat-4 node, read inside the caps; UnreadableNotebook if not."""
    import nbformat
    _check_file(path)
    _warm_validator()
    return nbformat.from_dict(_in_helper(_notebook, os.fspath(path), 2 * MAX_NOTEBOOK_BYTES)["notebook"])
