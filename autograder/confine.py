"""Program fragment run first inside a grading child: hide the course, freeze the filesystem.

Not imported by the judge: its text is prepended to the children's programs
(see sandbox.child_program and notebook_runner). Stdlib only.
"""
import ctypes as _ctypes
import os as _os


def _confine(spec):
    """Inside fresh user+mount namespaces: hide the course, keep what is needed read-only, freeze the rest.

    Afterwards the only writable place is the scratch directory, and the course
    (autograder, grading config, gradebook, other students) is an empty tmpfs.
    """
    libc = _ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18

    def mount(src, target, fstype, flags, data=None):
        enc = lambda v: v.encode() if v else None  # noqa: E731
        if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
            err = _ctypes.get_errno()
            raise OSError(err, f"mount {target}: {_os.strerror(err)}")

    scratch = spec["scratch"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount(scratch, scratch, None, MS_BIND)                     # its own mount: stays writable below
    held = []
    for i, keep in enumerate(spec["keep"]):                    # e.g. the venv, the data directory
        hold = _os.path.join(scratch, f".keep{i}")
        _os.makedirs(hold)
        mount(keep, hold, None, MS_BIND | MS_REC)
        held.append((hold, keep))
    for hidden in spec["hide"]:
        if _os.path.isdir(hidden):
            mount("tmpfs", hidden, "tmpfs", 0, "size=64k,mode=755")
    for hold, keep in held:
        if not _os.path.isdir(keep):
            _os.makedirs(keep)
        mount(hold, keep, None, MS_BIND | MS_REC)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in points:
        if point != scratch and not point.startswith(("/proc", "/sys", "/dev")):
            try:
                mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
            except OSError:
                pass
