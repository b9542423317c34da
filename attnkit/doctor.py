"""`attnkit doctor`: what is missing, in plain words, and how to fix it."""
from __future__ import annotations

import importlib.metadata as md
import os
import re
import shutil
import sys
from pathlib import Path

from . import KIT_ROOT


def _pins() -> dict[str, str]:
    pins = {}
    for line in (KIT_ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            pins[m.group(1)] = m.group(2)
    return pins


def check_python():
    ok = sys.version_info[:2] == (3, 11)
    return ok, f"Python {sys.version.split()[0]}" + ("" if ok else " (the pins are made for 3.11: install python3.11)")


def check_pins():
    wrong = []
    for name, want in _pins().items():
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            wrong.append(f"{name} missing")
            continue
        if have.split("+")[0] != want.split("+")[0]:
            wrong.append(f"{name} {have} (pinned {want})")
    if wrong:
        return False, "packages differ from requirements.lock: " + ", ".join(wrong[:8]) + " - run `make venv`"
    return True, f"{len(_pins())} packages match requirements.lock (torch {md.version('torch')})"


def check_alembic():
    found = shutil.which("alembic")
    return bool(found), (f"alembic on PATH ({found})" if found else
                         "alembic is not on PATH: nbgrader cannot create a gradebook; "
                         "activate the venv (source .venv/bin/activate) or use `make`")


def check_nbgrader_config():
    from autograder import config
    cfg = KIT_ROOT / "nbgrader_config.py"
    if not cfg.is_file():
        return False, "nbgrader_config.py missing at the course root"
    names = config.assignments()
    missing = [a for a in names if not (KIT_ROOT / "source" / a / f"{a}.ipynb").is_file()]
    if missing:
        return False, f"grading_config names {missing} but source/ has no notebook for them: run `attnkit release`"
    return True, f"nbgrader config loads grading_config/; assignments: {', '.join(names)}"


def check_data(data_dir=None):
    sys.path.insert(0, str(KIT_ROOT / "data"))
    import corpus
    path = corpus.locate(data_dir)
    if path is None:
        return False, (f"{corpus.FILENAME} not found in {', '.join(map(str, corpus.candidate_dirs(data_dir)))}: "
                       f"set ATTNKIT_DATA_DIR or run `python data/corpus.py`")
    try:
        corpus.verify(path)
    except corpus.CorpusError as e:
        return False, str(e)
    return True, f"{path} verified (SHA-256, {corpus.N_CHARS:,} characters)"


def run_doctor(data_dir=None, log=print) -> int:
    checks = [("python", check_python), ("packages", check_pins), ("alembic", check_alembic),
              ("nbgrader", check_nbgrader_config), ("data", lambda: check_data(data_dir))]
    failed = 0
    for name, fn in checks:
        try:
            ok, text = fn()
        except Exception as e:  # noqa: BLE001 - a doctor reports, it does not crash
            ok, text = False, f"{type(e).__name__}: {e}"
        failed += not ok
        log(f"{'ok ' if ok else 'FIX'}  {name:<9} {text}")
    log("all good" if not failed else f"{failed} problem(s) to fix")
    return 1 if failed else 0
