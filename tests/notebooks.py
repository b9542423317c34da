"""Build submission notebooks the way a student would (attnkit.mutants), and write them where a test needs."""
from pathlib import Path

import nbformat

from attnkit.mutants import cell, solution_source, submission  # noqa: F401 - the tests' names for them


def write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def hand_in(course: Path, assignment: str, student: str, answers: dict[str, str]) -> Path:
    """The course's release of ``assignment`` with each cell of ``answers`` (grade id -> source) written, handed
    in as ``student``'s submission (submitted/<student>/<assignment>/); its path."""
    nb = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    for grade_id, source in answers.items():
        cell(nb, grade_id).source = source
    dest = course / "submitted" / student / assignment
    dest.mkdir(parents=True)
    return write(nb, dest / f"{assignment}.ipynb")


def spied(nb, assignment: str, limits=None) -> str:
    """What a probing submission reported of what it saw: the raw text of every exception it raised, which the
    judge keeps for matching only and never shows on a page (attnkit/engine/channel.py). The attack tests read
    their probes' findings here, since the feedback no longer carries free text."""
    from attnkit.engine.judge import run_submission
    results = run_submission(nb, assignment, limits)[0]
    loaded = results.loaded or {}
    errors = [loaded.get("error"), *loaded.get("notes", []), *(m.get("error") for m, _ in results.results.values())]
    return " | ".join(e["raw"] for e in errors if e and e.get("raw"))
