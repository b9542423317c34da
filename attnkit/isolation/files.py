"""Copy the files a student handed in, and read their notebook, without following anything they made.

A submission folder is the student's: every name in it may be a symbolic link (to ``gradebook.db``,
to the instructor's source notebook, to ``/dev/zero``), a named pipe that blocks whoever opens it, a
socket, a file of gigabytes or a tree of a million entries. nbgrader copies submissions with
``shutil.copy``, which follows links and reads to the end, so a link to the gradebook lands in the
student's ``autograded/`` and ``feedback/`` folders. Here:

- only regular files and directories are copied; symbolic links (to files or directories), FIFOs,
  sockets and devices are refused and never opened (names are opened with ``O_NOFOLLOW``,
  directories walked by descriptor, so no component of a path can be swapped for a link);
- every file is opened once and copied from that descriptor, after ``fstat`` says it is a regular
  file (no check-then-open race), and read with a cap, so a file that grows while it is read stops
  at the cap;
- at most ``MAX_FILE_BYTES`` per file, ``MAX_ENTRIES`` files and folders, ``MAX_TOTAL_BYTES`` in all and
  ``MAX_DEPTH`` levels of folders; what is refused is listed in a ``Report`` whose ``note`` the
  student's feedback shows.

``attnkit.nbgrader_ext.patch`` puts this under nbgrader's ``autograde`` and ``generate_feedback``;
``copy_tree`` is also the call for any other copy of a submission folder (the kernel's scratch copy in
``attnkit.isolation.sandbox.run_notebook``).

Passive files only, where a TA's browser reaches the copy (``copy_tree(..., passive_only=True)``): formgrader
serves ``autograded/<student>/<A>/`` from the Jupyter server's origin with no sandbox (its
``SubmissionFilesHandler``, a plain tornado ``StaticFileHandler`` typed by ``mimetypes``), so an ``.html``, ``.svg``,
``.xhtml`` or ``.xml`` handed in there is a page that runs with the logged-in TA's rights. Only the types in
``PASSIVE_SUFFIXES`` are copied there and into ``feedback/``: an allowlist, because the class to close is "any
type a browser runs", which no list of bad extensions can enumerate. See ``passive_reason``.
"""
from __future__ import annotations

import errno
import fnmatch
import mimetypes
import os
import re
import stat
from dataclasses import dataclass, field

# The course's notebooks need no data beside them (corpora come from ATTNKIT_DATA_DIR): what a student
# hands in beside the notebook is a helper module or a small file. Every submission is copied three times
# (autograded/, feedback/, the kernel's scratch), for every student, so the caps keep a class of 300
# under ~100 GB in the worst case while leaving room for a saved figure or a small checkpoint.
MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_TOTAL_BYTES = 100 * 1024 * 1024
MAX_ENTRIES = 500
MAX_DEPTH = 16
# A notebook with many inline figures is a few MiB; nbgrader reads it whole, several times, into memory.
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024
MAX_TIMESTAMP_BYTES = 4096
CHUNK = 1 << 20

# What a student may hand in beside the notebook where a TA's browser can open it: each is shown by a browser as
# text or an image, or downloaded, never run. Helper modules and their data (.py, .txt, .md, .csv, .tsv, .json),
# arrays and checkpoints (.npy, .npz, .pt, .pth, .pkl, .bin, .safetensors), raster figures (.png, .jpg, .jpeg,
# .gif), notebooks. Not: .html/.htm/.xhtml/.xml/.svg (pages; SVG and XML run script), .js, .css, .pdf (a viewer
# with a script engine of its own), .mhtml, names without a type (what a server or browser makes of them is
# its guess). The released helpers (wordlm.py, pipeline_maps.py) come from source/, which nbgrader copies itself.
PASSIVE_SUFFIXES = frozenset({".py", ".txt", ".md", ".csv", ".tsv", ".json", ".npy", ".npz", ".pt", ".pth", ".pkl",
                              ".bin", ".safetensors", ".png", ".jpg", ".jpeg", ".gif", ".ipynb"})
# ... and the type a server names it by (tornado's StaticFileHandler asks ``mimetypes``, which reads the machine's
# /etc/mime.types) must be one a browser shows or downloads: a machine whose table maps an allowed suffix to a
# page type does not get it copied either. ``None`` is served as application/octet-stream.
PASSIVE_TYPES = frozenset({None, "text/plain", "text/x-python", "text/markdown", "text/csv",
                           "text/tab-separated-values", "application/json", "application/octet-stream",
                           "image/png", "image/jpeg", "image/gif"})
_RUNNABLE = re.compile(r"html|xml|script|svg|pdf|xsl|rfc822|multipart", re.I)


def _served_passively(mime: str | None) -> bool:
    """Types a browser shows as text or an image, and other ``application/`` types, which it downloads."""
    return mime in PASSIVE_TYPES or (mime.startswith("application/") and not _RUNNABLE.search(mime))


def passive_reason(name: str) -> str | None:
    """None when a file named ``name`` is served to a browser passively (see PASSIVE_SUFFIXES), else why not, in
    words for the student. By the last suffix, case-insensitively (``EVIL.HTML``); ``a.html.`` has none."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix not in PASSIVE_SUFFIXES:
        what = f"a `{suffix.replace('`', chr(39))}` file" if suffix not in ("", ".") else "a file without a type"
        return f"{what}, not one of the accepted types (which a browser never runs as a page or script)"
    mime, encoding = mimetypes.guess_type(name, strict=False)
    if encoding is not None or not _served_passively(mime):
        return f"served as {mime or encoding} on this machine, which a browser may run"
    return None


_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_O_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


class Refused(OSError):
    """A file that is not copied or read; ``reason`` says why in words for the student."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:g} MiB" if n % 2 ** 20 == 0 else f"{n} bytes"


def _too_big(size: int, cap: int) -> str:
    return f"{size} bytes, over the limit of {_mib(cap)}"


def kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


_LINK = (errno.ELOOP, errno.ENOTDIR)     # what O_NOFOLLOW (| O_DIRECTORY) says when the name is a link


def _refusal(e: OSError) -> str:
    if isinstance(e, Refused):
        return e.reason
    if e.errno in _LINK:
        return "a symbolic link"
    return f"could not be read ({e.strerror or e})"


def open_regular(name, dir_fd: int | None = None, max_bytes: int = MAX_FILE_BYTES) -> tuple[int, os.stat_result]:
    """(fd, stat) of the regular file ``name`` (relative to ``dir_fd``), opened without following a link.

    Anything but a regular file is refused before it is opened (a device is never opened); the open
    itself then follows no link, and O_NONBLOCK makes it return at once should the name have been swapped
    for a FIFO meanwhile, which fstat on the descriptor then refuses.
    """
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode):
        raise Refused(kind(mode))
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused("a symbolic link") from None
        if e.errno == errno.ENXIO:                                  # opening a socket
            raise Refused("a socket") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(kind(st.st_mode))
        if st.st_size > max_bytes:
            raise Refused(_too_big(st.st_size, max_bytes))
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def _read_fd(fd: int, max_bytes: int) -> bytes:
    chunks, n = [], 0
    while True:
        block = os.read(fd, min(CHUNK, max_bytes + 1 - n))
        if not block:
            return b"".join(chunks)
        chunks.append(block)
        n += len(block)
        if n > max_bytes:
            raise Refused(f"over the limit of {_mib(max_bytes)}")


def read_regular(path, max_bytes: int = MAX_FILE_BYTES, dir_fd: int | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of regular file ``path`` (no link followed in its last component), at most ``max_bytes``."""
    fd, st = open_regular(path, dir_fd, max_bytes)
    try:
        return _read_fd(fd, max_bytes), st
    finally:
        os.close(fd)


def read_in_folder(path, max_bytes: int = MAX_NOTEBOOK_BYTES) -> tuple[bytes, os.stat_result]:
    """Like ``read_regular``, and the folder holding ``path`` must not be a link either.

    For ``submitted/<student>/<assignment>/<notebook>.ipynb``: neither the assignment folder nor the
    notebook may point elsewhere (say, at the instructor's ``source/<assignment>/``).
    """
    folder, name = os.path.split(os.fspath(path))
    try:
        dfd = os.open(folder or ".", _O_DIR)
    except OSError as e:
        if e.errno in _LINK:
            raise Refused("in a folder that is a symbolic link") from None
        raise
    try:
        return read_regular(name, max_bytes, dir_fd=dfd)
    finally:
        os.close(dfd)


@dataclass
class Report:
    """What ``copy_tree`` copied and refused (paths relative to the source folder, '/'-separated)."""
    copied: list = field(default_factory=list)
    refused: list = field(default_factory=list)       # [(relative path, reason)]
    bytes: int = 0
    passive_only: bool = False                        # copied only PASSIVE_SUFFIXES (for the note's words)

    def note(self) -> str:
        """Plain words for the student's feedback ('' when nothing was refused)."""
        if not self.refused:
            return ""
        lines = ["Some files you handed in beside the notebook were not accepted, so they were not copied for "
                 f"grading or feedback (accepted: regular files and folders only{self._types()}, at most "
                 f"{_mib(MAX_FILE_BYTES)} per file, {MAX_ENTRIES} files and folders, {_mib(MAX_TOTAL_BYTES)} in "
                 "all):", ""]
        # the names are the student's: a backquote would end the code span and let the rest be markdown
        lines += [f"- `{path.replace('`', chr(39))}`: {reason}" for path, reason in self.refused[:50]]
        if len(self.refused) > 50:
            lines.append(f"- ... and {len(self.refused) - 50} more")
        return "\n".join(lines)

    def _types(self) -> str:
        return f", of the types {', '.join(sorted(PASSIVE_SUFFIXES))}" if self.passive_only else ""


def _ignored(name: str, patterns) -> bool:
    """nbgrader's rule (utils.is_ignored, a glob in the file's folder): the base name matches a pattern,
    and '*' or '?' at the start of a pattern do not match a leading dot."""
    for p in patterns or ():
        if name.startswith(".") and not p.startswith("."):
            continue
        if fnmatch.fnmatchcase(name, p):
            return True
    return False


def copy_tree(src, dst, *, skip=(), max_file_bytes: int = MAX_FILE_BYTES, max_entries: int = MAX_ENTRIES,
              max_total_bytes: int = MAX_TOTAL_BYTES, max_depth: int = MAX_DEPTH, log=None, ignore=(),
              passive_only: bool = False) -> Report:
    """Copy folder ``src`` into ``dst`` (created if missing; files already there are replaced), safely.

    Regular files and folders only (nothing is followed or opened that is not one), capped (see the
    module's docstring). ``skip`` (or ``ignore``): nbgrader-style glob patterns on base names, left out
    silently (e.g. ``("*.ipynb", ".*")``). ``passive_only``: regular files whose type a browser may run
    (``passive_reason``) are refused too, for folders a TA's browser reaches (autograded/, feedback/); the
    kernel's scratch copy, which no browser sees, keeps them. ``src`` itself must not be a link. Returns the Report;
    ``log(message)`` is called once with a summary when something was refused.
    """
    ignore = tuple(skip or ()) + tuple(ignore or ())
    report = Report(passive_only=passive_only)
    try:
        sfd = os.open(os.fspath(src), _O_DIR)
    except OSError as e:
        report.refused.append((".", _refusal(e)))
        if log:
            log(f"not copied: {src} ({report.refused[0][1]})")
        return report
    os.makedirs(dst, exist_ok=True)
    try:
        dfd = os.open(os.fspath(dst), os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except BaseException:
        os.close(sfd)
        raise
    budget = {"entries": 0}
    try:
        _copy_dir(sfd, dfd, "", 0, report, budget, ignore, max_file_bytes, max_entries, max_total_bytes, max_depth,
                  passive_only)
    finally:
        os.close(sfd)
        os.close(dfd)
    if report.refused and log:
        log(f"{len(report.refused)} entr{'y' if len(report.refused) == 1 else 'ies'} of {src} not copied: "
            + "; ".join(f"{p}: {r}" for p, r in report.refused[:10]))
    return report


def _copy_dir(sfd, dfd, rel, depth, report, budget, ignore, max_file, max_entries, max_total, max_depth, passive):
    """Copy folder ``sfd`` into ``dfd``. Every entry looked at (copied or refused) counts towards
    ``max_entries``, so a folder of a million links costs no more than one of 500 files."""
    names, more = [], False
    with os.scandir(sfd) as it:
        for entry in it:
            if _ignored(entry.name, ignore):
                continue
            if budget["entries"] + len(names) >= max_entries:
                more = True                       # the rest is neither listed nor copied
                break
            names.append(entry.name)
    for name in sorted(names):
        path = f"{rel}{name}"
        budget["entries"] += 1
        try:
            st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
        except OSError as e:
            report.refused.append((path, _refusal(e)))
            continue
        if stat.S_ISDIR(st.st_mode):
            if depth + 1 > max_depth:
                report.refused.append((path + "/", f"folders nested deeper than {max_depth} levels"))
                continue
            try:
                child = os.open(name, _O_DIR, dir_fd=sfd)
            except OSError as e:
                report.refused.append((path + "/", _refusal(e)))
                continue
            try:
                try:
                    os.mkdir(name, 0o755, dir_fd=dfd)
                except FileExistsError:
                    pass
                try:
                    out = os.open(name, _O_DIR, dir_fd=dfd)
                except OSError as e:
                    report.refused.append((path + "/", f"cannot be copied there ({e.strerror})"))
                    continue
                try:
                    _copy_dir(child, out, path + "/", depth + 1, report, budget, ignore, max_file, max_entries,
                              max_total, max_depth, passive)
                finally:
                    os.close(out)
            finally:
                os.close(child)
            continue
        if not stat.S_ISREG(st.st_mode):
            report.refused.append((path, kind(st.st_mode)))           # never opened
            continue
        why = passive_reason(name) if passive else None
        if why:
            report.refused.append((path, why))                        # never opened either
            continue
        if st.st_size > max_file:
            report.refused.append((path, _too_big(st.st_size, max_file)))
            continue
        if report.bytes + st.st_size > max_total:
            report.refused.append((path, f"over the limit of {_mib(max_total)} in all"))
            continue
        try:                                  # the cap again while reading: the file may grow meanwhile
            n = _copy_file_at(sfd, name, dfd, name, min(max_file, max_total - report.bytes))
        except OSError as e:
            report.refused.append((path, _refusal(e)))
            continue
        report.bytes += n
        report.copied.append(path)
    if more:
        report.refused.append(((rel or "./") + "...", f"the rest of this folder: over the limit of {max_entries} "
                                                      f"files and folders"))


def _copy_file_at(sfd, sname, dfd, dname, max_bytes: int) -> int:
    """Copy regular file ``sname`` (in folder ``sfd``) to ``dname`` (in folder ``dfd``), replacing a file there."""
    fd, st = open_regular(sname, sfd, max(0, max_bytes))
    try:
        try:
            there = os.stat(dname, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None:
            if stat.S_ISDIR(there.st_mode):
                raise Refused("a folder of that name is already there")
            os.unlink(dname, dir_fd=dfd)
        out = os.open(dname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                      0o600, dir_fd=dfd)
        n = 0
        try:
            while True:
                block = os.read(fd, min(CHUNK, max_bytes + 1 - n))
                if not block:
                    break
                n += len(block)
                if n > max_bytes:
                    raise Refused(f"grew past the limit of {_mib(max_bytes)} while it was copied")
                view = memoryview(block)
                while view:
                    view = view[os.write(out, view):]
            os.fchmod(out, (st.st_mode & 0o755) | 0o600)         # as shutil.copy: the mode, minus setuid & co
        except BaseException:
            os.close(out)
            out = None
            try:
                os.unlink(dname, dir_fd=dfd)
            except OSError:
                pass
            raise
        finally:
            if out is not None:
                os.close(out)
        return n
    finally:
        os.close(fd)
