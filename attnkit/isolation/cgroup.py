"""A cgroup per submission: hard caps on the memory and the tasks of all its processes together.

Per-process limits (RLIMIT_AS) let two processes each take the whole budget; a cgroup counts
them together, and its task cap stops a fork bomb at once. Made where the grader may (root, a
writable cgroup hierarchy: v2 with the memory and pids controllers, or v1's memory and pids
hierarchies); elsewhere ``create`` returns None and the child's monitor, PID 1 of its namespace,
watches the summed memory and the number of processes itself (child_runtime._Namespace), with
RLIMIT_NPROC as the hard stop.
"""
from __future__ import annotations

import itertools
import os
import signal
import time

from attnkit.isolation import settings

_serial = itertools.count()


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path."""
    found = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                found[c] = path
    return found


def _mount_points() -> dict[str, str]:
    """cgroup v1 controller or "" (v2) -> where its hierarchy is mounted."""
    points = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, _, options = right.split()[:3]
            point = left.split()[4]
            if fstype == "cgroup2":
                points.setdefault("", point)
            elif fstype == "cgroup":
                for c in options.split(","):
                    if c in ("memory", "pids"):
                        points[c] = point
    return points


class Group:
    """One submission's cgroup directories; ``procs`` are the files its first process joins by."""

    def __init__(self, dirs: list[str], procs: list[str]):
        self.dirs, self.procs = dirs, procs

    def close(self) -> None:
        """Kill whatever is left in it and remove it."""
        for attempt in range(60):
            pids = set()
            for p in self.procs:
                try:
                    with open(p) as f:
                        pids |= {int(x) for x in f.read().split()}
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            left = []
            for d in self.dirs:
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(d)
            if not left:
                return
            self.dirs = left
            time.sleep(min(0.001 * 2 ** attempt, 0.05))   # killed tasks leave within milliseconds


def _try_v2(base: str, name: str, memory_bytes: int, tasks: int) -> Group | None:
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as f:
            enabled = set(f.read().split())
    except OSError:
        return None
    if not {"memory", "pids"} <= enabled:
        return None
    d = os.path.join(base, name)
    os.mkdir(d)
    try:
        for file, value in (("memory.max", memory_bytes), ("memory.swap.max", 0), ("pids.max", tasks)):
            try:
                with open(os.path.join(d, file), "w") as f:
                    f.write(str(value))
            except FileNotFoundError:
                if file != "memory.swap.max":
                    raise
    except OSError:
        os.rmdir(d)
        return None
    return Group([d], [os.path.join(d, "cgroup.procs")])


def create(memory_mb: int, tasks: int) -> Group | None:
    """A fresh cgroup capping memory at ``memory_mb`` MiB and tasks at ``tasks``, or None."""
    if os.geteuid() != 0 or not settings.current().cgroups:
        return None
    name = f"attnkit-{os.getpid()}-{next(_serial)}"
    memory_bytes = int(memory_mb) * 1024 * 1024
    try:
        own, points = _own_cgroups(), _mount_points()
        if "" in points and "" in own:
            group = _try_v2(points[""] + own[""], name, memory_bytes, tasks)
            if group:
                return group
        if "memory" in points and "pids" in points:
            dirs = []
            try:
                for c, limits in (("memory", (("memory.limit_in_bytes", memory_bytes),)),
                                  ("pids", (("pids.max", tasks),))):
                    d = os.path.join(points[c] + own.get(c, "/"), name)
                    os.mkdir(d)
                    dirs.append(d)
                    for file, value in limits:
                        with open(os.path.join(d, file), "w") as f:
                            f.write(str(value))
            except OSError:
                Group(dirs, []).close()
                return None
            return Group(dirs, [os.path.join(d, "cgroup.procs") for d in dirs])
    except (OSError, ValueError):
        return None
    return None
