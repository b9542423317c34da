"""How isolation runs on this machine, declared once. Each setting is an environment variable, because the
machine sets it, not the course: the Gradescope image's run_autograder, a container without namespaces, the
tests. They are read here, and only here, at each use (a test or a caller may change them in process).

| variable | default | meaning |
|---|---|---|
| ``ATTNKIT_CHILD_USER`` | unset | the user a grading child drops to when the grader is root and namespaces are unavailable (the Gradescope image's ``student``); unset: ``nobody`` where a uid is needed |
| ``ATTNKIT_ZYGOTE`` | ``1`` | ``0``: a fresh interpreter per submission instead of forks of the warm fork server |
| ``ATTNKIT_NO_NAMESPACES`` | unset | set: never try user namespaces (the fallback path: limits and a dropped uid) |
| ``ATTNKIT_NO_CGROUPS`` | unset | set: no cgroup per submission even as root (memory is then capped per process only) |
"""
import os as _os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    child_user: str | None
    zygote: bool
    namespaces: bool
    cgroups: bool


def current() -> Settings:
    env = _os.environ
    return Settings(child_user=env.get("ATTNKIT_CHILD_USER") or None,
                    zygote=env.get("ATTNKIT_ZYGOTE", "1") != "0",
                    namespaces=not env.get("ATTNKIT_NO_NAMESPACES"),
                    cgroups=not env.get("ATTNKIT_NO_CGROUPS"))
