"""The Linux calls isolation makes through libc: prctl and the capabilities, in one place.

Imported by the processes that run beside a submission (``python -I -S``: ctypes and the standard library only).
Where libc has no prctl (not Linux), ``prctl`` returns -1 and the callers keep their fallbacks.
"""
import ctypes as _ctypes
import functools as _functools

PR_SET_PDEATHSIG = 1          # a signal from the kernel when the parent dies
PR_SET_DUMPABLE = 4           # 0: no ptrace, no /proc/self/mem of this process by its peers
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38      # no exec may gain privileges again (setuid binaries, file capabilities)
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


@_functools.lru_cache(maxsize=None)
def libc():
    return _ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    try:
        return libc().prctl(option, int(arg2), arg3, arg4, arg5)
    except (OSError, AttributeError):
        return -1


def die_with_parent(signum: int) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies (a check of getppid() after it
    closes the race with a parent that died first). False where that cannot be asked."""
    return prctl(PR_SET_PDEATHSIG, signum) == 0


def set_dumpable(flag: bool) -> int:
    return prctl(PR_SET_DUMPABLE, 1 if flag else 0)
