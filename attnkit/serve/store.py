"""The check service's state: one SQLite file in the course's ``.attnkit/`` (owner-only, never committed).

It holds the students' tokens (as SHA-256 hashes only), each student's bucket per assignment, and a record of
every check. On disk, not in the service's memory, so a restart forgets no one's limit; SQLite's own locking lets
``attnkit tokens ...`` change it while the service runs.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

FILENAME = "check-service.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    student TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, created REAL NOT NULL, revoked REAL);
CREATE TABLE IF NOT EXISTS buckets (
    student TEXT NOT NULL, assignment TEXT NOT NULL, tokens REAL NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (student, assignment));
CREATE TABLE IF NOT EXISTS checks (
    id INTEGER PRIMARY KEY, student TEXT NOT NULL, time REAL NOT NULL, assignment TEXT NOT NULL,
    score REAL, max_score REAL, notebook_sha256 TEXT NOT NULL, tier TEXT NOT NULL);
"""


def default_dir(course: Path) -> Path:
    return course / ".attnkit"


class Store:
    """The database at ``folder/check-service.sqlite``, made owner-only on first use."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.path = self.folder / FILENAME
        self._lock = threading.Lock()     # one writer of this process at a time; SQLite orders the processes
        self._create()

    def _create(self) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        ignore = self.folder / ".gitignore"          # as secret.py does: the course's kit state is never committed
        if not ignore.exists():
            ignore.write_text("# attnkit's state of this course: never committed\n*\n")
        # made 0600 before SQLite opens it (SQLite gives its journal the database's mode)
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.chmod(self.path, 0o600)
        with self.transaction() as db:
            for statement in filter(str.strip, _SCHEMA.split(";")):     # executescript would commit on its own
                db.execute(statement)

    @contextlib.contextmanager
    def transaction(self):
        """A connection inside one write transaction (BEGIN IMMEDIATE: read-then-write without a race)."""
        with self._lock:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                db.close()

    def query(self, sql: str, args=()) -> list[tuple]:
        with self.transaction() as db:
            return db.execute(sql, args).fetchall()
