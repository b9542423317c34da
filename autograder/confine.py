"""Program fragment run first inside a grading child: hide the course, freeze the filesystem, give up power.

Not imported by the judge: its text is prepended to the children's programs
(see sandbox.child_program and notebook_runner). Stdlib only.
"""
import ctypes as _ctypes
import os as _os


_KEPT_FLAGS = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
               "relatime": 1 << 21, "strictatime": 1 << 24}


def _mounts():
    """(mount point, its per-mount options) for every mount this process sees."""
    with open("/proc/self/mountinfo") as f:
        rows = [line.split() for line in f]
    unescape = lambda p: p.encode().decode("unicode_escape")  # noqa: E731 - \040 for a space, etc.
    return [(unescape(r[4]), set(r[5].split(","))) for r in rows]


def _writable_mounts(scratch):
    """The mounts still writable that must not be: all but the scratch directory, /proc, /sys and /dev."""
    return [(point, options) for point, options in _mounts()
            if "ro" not in options and point != scratch and not point.startswith(("/proc", "/sys", "/dev"))]


def _new_user_namespace(libc, inner_id, flags=0):
    """unshare a new user namespace (and ``flags``' other namespaces) where our uid and gid are ``inner_id``."""
    CLONE_NEWUSER = 0x10000000
    uid, gid = _os.geteuid(), _os.getegid()
    if libc.unshare(CLONE_NEWUSER | flags) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"unshare: {_os.strerror(err)}")
    for name, text in (("uid_map", f"{inner_id} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{inner_id} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _confine(spec):
    """Inside fresh user+mount namespaces: hide the course, keep what is needed read-only, freeze the rest.

    Afterwards the only writable place is the scratch directory, the course
    (autograder, grading config, gradebook, other students) is an empty tmpfs, /proc shows
    only the child's own processes, and the child holds no capability that could undo any of it.
    """
    libc = _ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
    MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18

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
    for point, options in _writable_mounts(scratch):
        kept = sum(flag for name, flag in _KEPT_FLAGS.items() if name in options)   # locked: must stay
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)
        except OSError:
            pass
    writable = [point for point, _ in _writable_mounts(scratch)]
    if writable:            # fail closed: never run a submission on a filesystem it could write
        raise OSError(f"could not make read-only: {', '.join(writable)}")
    for target, fstype, data in (("/proc", "proc", None), ("/dev/shm", "tmpfs", "size=64m,mode=1777")):
        try:   # our own /proc (no grader or classmate process to read or write) and a private /dev/shm
            mount(fstype, target, fstype, MS_NOSUID | MS_NODEV | MS_NOEXEC, data)
        except OSError:
            pass
    _give_up_power(libc)


def _give_up_power(libc):
    """Leave the namespace's root behind: an unprivileged user in a nested user namespace, no capabilities.

    Root of the first user namespace owns the mount namespace and so could unmount the tmpfs
    over the course or remount the filesystem writable. Here the process becomes uid 1000 of a
    nested user namespace, which has no power over the mounts made above (any mount namespace it
    creates copies them locked, read-only flags included); it then drops every capability and
    can never gain one again (no_new_privs), not even through execve.
    """
    PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 38, 24, 47
    _new_user_namespace(libc, 1000)
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)                     # PR_CAP_AMBIENT_CLEAR_ALL
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (_ctypes.c_uint32 * 2)(0x20080522, 0)             # _LINUX_CAPABILITY_VERSION_3, this process
    data = (_ctypes.c_uint32 * 6)()                            # effective, permitted, inheritable: none
    if libc.capset(header, data) != 0 or libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"dropping capabilities: {_os.strerror(err)}")
