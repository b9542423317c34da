"""Build submission notebooks the way a student would (attnkit.mutants), and write them where a test needs."""
from pathlib import Path

import nbformat

from attnkit.mutants import cell, solution_source, submission  # noqa: F401 - the tests' names for them


def write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def spied(nb, assignment: str, limits=None) -> str:
    """What a probing submission reported of what it saw: the raw text of every exception it raised, which the
    judge keeps for matching only and never shows on a page (attnkit/engine/channel.py). The attack tests read
    their probes' findings here, since the feedback no longer carries free text."""
    from attnkit.engine.judge import run_submission
    results = run_submission(nb, assignment, limits)[0]
    loaded = results.loaded or {}
    errors = [loaded.get("error"), *loaded.get("notes", []), *(m.get("error") for m, _ in results.results.values())]
    return " | ".join(e["raw"] for e in errors if e and e.get("raw"))
