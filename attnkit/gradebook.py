"""Where a course keeps its nbgrader gradebook, read from the course's own nbgrader configuration.

A course's nbgrader_config.py may put the gradebook anywhere (``c.CourseDirectory.db_url``; nbgrader's default
is ``sqlite:///<root>/gradebook.db``). Every attnkit command that reads or writes grades asks ``locate`` here,
so it uses the gradebook that `nbgrader autograde` run in the course uses.

Cost: the configuration is loaded by nbgrader's own app, which needs nbgrader imported (seconds: the package
imports all its apps). Every gradebook reader pays that already for ``nbgrader.api``; loading the course's
configuration on top of it takes about 0.05 s.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


class CourseConfigError(Exception):
    """nbgrader could not load the course's configuration (it exited), said in one sentence."""


class NoGradebook(Exception):
    """The course's gradebook does not exist (yet): a reader refuses rather than create it empty."""


@dataclass(frozen=True)
class Location:
    """A course's gradebook: the database URL and the course id nbgrader records grades under."""
    url: str
    course_id: str

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for another database (or an in-memory one)."""
        from sqlalchemy.engine import make_url
        u = make_url(self.url)
        if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
            return None
        return Path(u.database)

    def exists(self) -> bool:
        """For SQLite, whether the file exists. Another database cannot be told apart without connecting:
        it counts as existing, and nbgrader's own error says what is wrong with it."""
        path = self.path
        return path.is_file() if path is not None else True

    def __str__(self) -> str:
        """What messages name: the file for SQLite, else the URL without its password."""
        if self.path is not None:
            return str(self.path)
        from sqlalchemy.engine import make_url
        return make_url(self.url).render_as_string(hide_password=True)


def load_app(course: Path, app_class=None):
    """nbgrader's ``app_class`` (default: the base every nbgrader command extends) initialised with the course's
    configuration, as `nbgrader <command>` run in ``course`` would be (the course's nbgrader_config.py, and the
    user's and system's Jupyter config folders)."""
    if app_class is None:
        from nbgrader.apps.baseapp import NbGrader as app_class
    course = Path(course).resolve()
    app = app_class()
    saved_path, saved_cwd = list(sys.path), os.getcwd()
    try:
        os.chdir(course)                  # nbgrader loads nbgrader_config.py from the working directory too
        app.initialize([], root=str(course))
    except SystemExit as e:
        raise CourseConfigError(f"nbgrader could not load the course configuration in {course} "
                                f"(exit {e.code})") from None
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path          # NbGrader.initialize puts the cwd on sys.path; keep ours clean
    return app


def from_coursedir(coursedir) -> Location:
    """The gradebook of an initialised nbgrader CourseDirectory. A relative SQLite path is taken from the course
    root (where nbgrader's commands run), so a command run from elsewhere (--course-dir) opens the same file."""
    from sqlalchemy.engine import make_url
    url = coursedir.db_url
    u = make_url(url)
    if u.get_backend_name() == "sqlite" and u.database not in (None, "", ":memory:") \
            and not os.path.isabs(u.database) and not u.database.startswith("file:"):
        url = u.set(database=os.path.join(coursedir.root, u.database)).render_as_string(hide_password=False)
    return Location(url=url, course_id=coursedir.course_id)


def locate(course: Path) -> Location:
    """The gradebook of the course at ``course``, exactly where nbgrader's commands run there keep it."""
    return from_coursedir(load_app(course).coursedir)


@contextmanager
def opened(where: Location, create: bool = False):
    """nbgrader's Gradebook for ``where``. A missing SQLite file raises NoGradebook unless ``create``:
    nbgrader's Gradebook would create it empty, and a reader must not leave an empty gradebook behind."""
    if not create and not where.exists():
        raise NoGradebook(f"no gradebook at {where}")
    from nbgrader.api import Gradebook
    with Gradebook(where.url, where.course_id) as gb:
        yield gb
