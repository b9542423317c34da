"""A private world for a grading child, and no power to leave it.

Not imported by the judge: the children's programs import it before anything of the submission exists
(sandbox.child_program, sandbox.runner_program, the probe of sandbox.namespaces_available).
Stdlib only. Two steps, split by a fork into a new PID namespace:

``build_world(world)``, in the process the judge started (still the grader's identity):
    a new mount namespace whose root is an empty tmpfs holding read-only binds of only what the
    child needs (the system directories, the Python installation, the virtual environment, the
    data directory, an input folder): not the course, not /home, not /tmp, not other children's
    files. Where the grader is root it then becomes an unprivileged user (``nobody`` unless told
    otherwise), so host files only root may read stay unreadable; then new user, PID, network
    and IPC namespaces.
    Its /tmp is a size-capped tmpfs of its own (its only writable place besides /dev/shm: HOME,
    working directory and TMPDIR), made before the binds so that one below /tmp stays visible.
``settle_world(world)``, in PID 1 of those namespaces:
    its own /proc (only its own processes) and /dev/shm, every other mount read-only (fail
    closed), and then ``give_up_power``: an unprivileged uid of a nested user namespace with no
    capabilities and no_new_privs, so no mount can be undone.
"""
import ctypes as _ctypes
import os as _os
import platform as _platform

from attnkit.isolation import linux

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000
CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
_KEPT_FLAGS = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
               "relatime": 1 << 21, "strictatime": 1 << 24}
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
DEVICES = ("null", "zero", "full", "random", "urandom")
WORLD_ROOT = "/tmp"            # where the new root is assembled: a directory every system has


def _libc():
    return linux.libc()


def _check(result, what):
    if result != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{what}: {_os.strerror(err)}")


def _mount(libc, src, target, fstype, flags, data=None):
    enc = lambda v: v.encode() if v else None  # noqa: E731
    _check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _mounts():
    """(mount point, its per-mount options) for every mount this process sees."""
    with open("/proc/self/mountinfo") as f:
        rows = [line.split() for line in f]
    unescape = lambda p: p.encode().decode("unicode_escape")  # noqa: E731 - \040 for a space, etc.
    return [(unescape(r[4]), set(r[5].split(","))) for r in rows]


def _writable_mounts(allowed):
    """The mounts still writable that must not be: all but ``allowed``, /proc and below."""
    return [(point, options) for point, options in _mounts()
            if "ro" not in options and point not in allowed and not point.startswith("/proc")]


def _new_user_namespace(libc, inner_id, flags=0):
    """unshare a new user namespace (and ``flags``' other namespaces) where our uid and gid are ``inner_id``."""
    uid, gid = _os.geteuid(), _os.getegid()
    _check(libc.unshare(CLONE_NEWUSER | flags), "unshare")
    for name, text in (("uid_map", f"{inner_id} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{inner_id} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _binds(paths):
    """(source, target) pairs for ``paths``: real paths, outermost first, none inside another;
    and (link, target) for each path that is a symlink, so that it still resolves."""
    real, links = [], []
    for p in paths:
        if not p or not _os.path.exists(p):
            continue
        if _os.path.islink(p) and _os.path.dirname(p) == "/":       # e.g. /lib -> usr/lib on merged /usr
            links.append((p, _os.readlink(p)))
            continue
        rp = _os.path.realpath(p)
        real.append(rp)
        if rp != p:
            links.append((p, rp))
    real = sorted(set(real), key=lambda p: (p.count("/"), p))
    kept = [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]
    return kept, links


def _remount_readonly(allowed):
    for point, options in _writable_mounts(allowed):
        kept = sum(flag for name, flag in _KEPT_FLAGS.items() if name in options)   # locked: must stay
        try:
            _mount(_libc(), None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept)
        except OSError:
            pass
    writable = [point for point, _ in _writable_mounts(allowed)]
    if writable:            # fail closed: never run a submission on a filesystem it could write
        raise OSError(f"could not make read-only: {', '.join(writable)}")


def build_world(world):
    """In the process the judge started: assemble the new root, pivot into it, leave root, unshare."""
    libc = _libc()
    for procs in world.get("cgroups", ()):           # the submission's own cgroups, joined while we may
        with open(procs, "w") as f:
            f.write(str(_os.getpid()))
    privileged = _os.geteuid() == 0
    if privileged:
        _check(libc.unshare(CLONE_NEWNS), "unshare")
    else:
        _new_user_namespace(libc, 0, CLONE_NEWNS)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    paths, links = _binds(world["ro"])
    # Held before the new root covers /tmp: a source may live there (an input folder, a data dir).
    held = [(p, _os.open(p, _os.O_PATH | _os.O_DIRECTORY)) for p in paths]
    held += [(f"/dev/{d}", _os.open(f"/dev/{d}", _os.O_PATH)) for d in DEVICES if _os.path.exists(f"/dev/{d}")]
    held += [(dst, _os.open(src, _os.O_PATH | _os.O_DIRECTORY)) for src, dst in world.get("ro_at", ())]
    new = WORLD_ROOT
    _mount(libc, "tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    # The child's /tmp first, so that what is bound below it (a checkout under /tmp, say) stays in view.
    _os.makedirs(new + "/tmp")
    _mount(libc, "tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(world['tmp_mb'])}m,mode=1777")
    for target, fd in held:
        inside = new + target
        if _os.path.isdir(f"/proc/self/fd/{fd}"):
            _os.makedirs(inside, exist_ok=True)
        else:
            _os.makedirs(_os.path.dirname(inside), exist_ok=True)
            open(inside, "w").close()
        _mount(libc, f"/proc/self/fd/{fd}", inside, None, MS_BIND | MS_REC)
        _os.close(fd)
    for link, target in links:
        inside = new + link
        if not _os.path.lexists(inside):
            _os.makedirs(_os.path.dirname(inside), exist_ok=True)
            _os.symlink(target, inside)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        _os.makedirs(new + "/dev", exist_ok=True)
        _os.symlink(target, f"{new}/dev/{name}")
    for d in ("/dev/shm", "/proc"):
        _os.makedirs(new + d, exist_ok=True)
    # The grader's /proc, only so that PID 1 may mount its own over it (the kernel allows a new proc
    # only where one is fully visible); covered before any submission code runs.
    _mount(libc, "/proc", new + "/proc", None, MS_BIND | MS_REC)
    _os.chdir(new)
    _check(libc.syscall(_SYS_PIVOT_ROOT[_platform.machine()], b".", b"."), "pivot_root")
    _check(libc.umount2(b".", 2), "detaching the old root")                 # MNT_DETACH
    _os.chdir("/")
    _remount_readonly(allowed=("/tmp",))
    # A Dask client (autograde/cluster_relay.py) keeps the host's network to reach the scheduler; a child never does.
    net = 0 if world.get("host_network") else CLONE_NEWNET
    if privileged:                                    # root outside would be root over host files
        _become(world.get("uid", 65534), world.get("gid", 65534))
        _new_user_namespace(libc, 0, CLONE_NEWNS | CLONE_NEWPID | net | CLONE_NEWIPC)
    else:
        _check(libc.unshare(CLONE_NEWPID | net | CLONE_NEWIPC), "unshare")


def _become(uid, gid):
    _os.setgroups([])
    _os.setresgid(gid, gid, gid)
    _os.setresuid(uid, uid, uid)
    if 0 in _os.getresuid():
        raise OSError("could not leave root")
    linux.set_dumpable(True)                          # our own /proc/self/uid_map again


def settle_world(world):
    """In PID 1 of the new namespaces: its own /proc, /tmp and /dev/shm; nothing else writable; no power."""
    libc = _libc()
    try:                                              # its own processes only
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:                                   # never leave the grader's in view
        _mount(libc, "tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
    _mount(libc, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           f"size={int(world.get('shm_mb', 64))}m,mode=1777")
    _remount_readonly(allowed=("/tmp", "/dev/shm"))
    _os.chdir("/tmp")
    _os.environ.update(HOME="/tmp", TMPDIR="/tmp")
    give_up_power(libc)


def give_up_power(libc=None):
    """Leave the namespace's root behind: an unprivileged user in a nested user namespace, no capabilities.

    Root of the first user namespace owns the mount namespace and so could unmount the tmpfs
    root or remount the filesystem writable. Here the process becomes uid 1000 of a nested user
    namespace, which has no power over the mounts made above (any mount namespace it creates
    copies them locked, read-only flags included); it then drops every capability and can never
    gain one again (no_new_privs), not even through execve.
    """
    libc = libc or _libc()
    _new_user_namespace(libc, 1000)
    libc.prctl(linux.PR_CAP_AMBIENT, linux.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        libc.prctl(linux.PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (_ctypes.c_uint32 * 2)(0x20080522, 0)             # _LINUX_CAPABILITY_VERSION_3, this process
    data = (_ctypes.c_uint32 * 6)()                            # effective, permitted, inheritable: none
    if libc.capset(header, data) != 0 or libc.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"dropping capabilities: {_os.strerror(err)}")


def hide_from_peers():
    """No process of the same uid may trace this one or open its /proc files (its pipes, its memory)."""
    linux.set_dumpable(False)
