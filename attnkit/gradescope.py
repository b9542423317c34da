"""Inside Gradescope's container: grade the one notebook in /autograder/submission into results.json.

``run_autograder`` (built by ``attnkit export A --format gradescope``) runs ``python -m attnkit.gradescope A``
as root for every submission. Grading is ``attnkit.engine.judge.grade``, the function ``attnkit grade``
and the nbgrader path use, so Gradescope's scores are theirs. The student's code runs only in the
judge's confined child process; this process, which writes results.json, never runs any of it.

Environment: ``AUTOGRADER_ROOT`` (default /autograder, overridable for tests); ``ATTNKIT_CHILD_USER``, the
user the judge's child drops to when grading runs as root (set by run_autograder; must exist).
"""
from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import time
import traceback
from pathlib import Path

import attnkit
from attnkit.engine import registry
from attnkit.isolation import files
from attnkit.atomic import write_atomic
from attnkit.isolation import settings
import pwd
from attnkit.isolation import sandbox
from attnkit.engine import config, judge
from attnkit.table import result_table

DEFAULT_ROOT = "/autograder"


def results_json(result: dict, cfg) -> dict:
    """Gradescope's results.json for the judge's ``result`` (``attnkit grade --json``) under config ``cfg``.

    One test per check. Visible checks are shown at once; hidden ones "after_due_date" (Gradescope then
    also hides the total until then, so the top-level output gives the visible checks' subtotal).
    """
    visible = {c.id: c.visible for c in cfg.checks}
    tests = []
    for c in result["checks"]:
        output = c["message"]
        if not c["passed"] and c.get("diagnosis"):
            output += f"\nDiagnosis: {c['diagnosis']}"
        tests.append({"name": c["title"], "score": float(c["points"]), "max_score": float(c["max_points"]),
                      "status": "passed" if c["passed"] else "failed", "output": output,
                      # a check the configuration does not know is treated as hidden, never shown early
                      "visibility": "visible" if visible.get(c["id"], False) else "after_due_date"})
    shown = [t for t in tests if t["visibility"] == "visible"]
    lines = []
    if result.get("error"):
        lines.append(f"Your notebook could not be graded completely: {result['error']}")
    lines.append(f"Visible checks: {sum(t['score'] for t in shown):g} / {sum(t['max_score'] for t in shown):g} points.")
    hidden_max = sum(t["max_score"] for t in tests) - sum(t["max_score"] for t in shown)
    if hidden_max:
        lines.append(f"Hidden checks ({hidden_max:g} points) have been graded too; their results and your total "
                     f"appear after the due date.")
    return {"score": float(sum(t["score"] for t in tests)), "output": "\n".join(lines), "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def failure_json(message: str) -> dict:
    """No grading happened (no notebook, several, a fault of the grader): score 0 and one plain sentence."""
    return {"score": 0.0, "output": message, "visibility": "visible", "stdout_visibility": "hidden", "tests": []}


def _regular(p: Path) -> bool:
    """A regular file itself: not a link (which could make this root process read, and quote, a file of the
    kit), nor a FIFO (opening it would block grading until Gradescope's timeout), socket or device."""
    try:
        return stat.S_ISREG(p.lstat().st_mode)
    except OSError:
        return False


def find_notebook(submission: Path) -> tuple[Path | None, str | None]:
    """(the submitted notebook, None) or (None, what the student should fix)."""
    found = sorted(p for p in submission.rglob("*.ipynb")          # rglob does not descend into linked folders
                   # Jupyter's checkpoints and macOS zip metadata are not what the student meant to hand in
                   if _regular(p)
                   and not any(part.startswith(".") or part == "__MACOSX" for part in p.relative_to(submission).parts))
    if len(found) == 1:
        return found[0], None
    if not found:
        return None, "No Jupyter notebook (.ipynb) was found in your submission. Upload your .ipynb file."
    names = ", ".join(str(p.relative_to(submission)) for p in found)
    return None, f"Your submission holds {len(found)} notebooks ({names}); upload exactly one .ipynb file."


def write_results(path: Path, data: dict) -> None:
    """Atomically: Gradescope (or a reader racing this) sees the old file or the whole new one."""
    write_atomic(path, json.dumps(data, indent=1))


def _child_user_missing() -> str | None:
    """As root, the judge's child drops to ATTNKIT_CHILD_USER; refuse to grade if that user does not exist."""
    user = settings.current().child_user
    if os.geteuid() != 0 or not user:
        return None
    try:
        pwd.getpwnam(user)
    except KeyError:
        return f"user {user!r} (ATTNKIT_CHILD_USER) does not exist: setup.sh creates it"
    return None


def confinement() -> str:
    """Which of the judge's two confinements the student's code ran under here, for the instructor."""
    if sandbox.namespaces_available():      # probed once, when the judge first ran a child: no cost now
        return "confinement: the child's own namespaces (a private root, no network)"
    user = settings.current().child_user if os.geteuid() == 0 else None
    return (f"confinement: no namespaces in this container; the child ran as user {user!r}" if user else
            "confinement: no namespaces here, and not root: the child ran as this process's user")


def grade_submission(assignment: str, root: Path) -> tuple[dict, int]:
    """(results.json's content, exit status) for the submission under ``root``."""
    cfg = config.load(assignment)
    fault = _child_user_missing()
    if fault:
        print(f"attnkit.gradescope: {fault}", file=sys.stderr)
        return failure_json("The autograder is misconfigured (this is not your fault); your instructor can see why."), 1
    nb, problem = find_notebook(root / "submission")
    if problem:
        print(problem)
        return failure_json(problem), 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attnkit-submission-") as private:     # 0700, root's
        copy, problem = copy_notebook(nb, Path(private))
        if problem:
            print(problem)
            return failure_json(problem), 0
        # a fault of the kit raises: main() turns it into a sentence
        result = judge.grade(copy, assignment, student=gradescope_student(root))
    print(f"graded {nb.relative_to(root / 'submission')} in {time.monotonic() - t0:.1f} s\n{result_table(result)}")
    print(confinement())
    return dict(results_json(result, cfg), execution_time=round(time.monotonic() - t0)), 0


def gradescope_student(root: Path) -> str:
    """Whose inputs the judge draws (attnkit/engine/secret.py): the Gradescope user ids of the submission's
    owners, from the ``submission_metadata.json`` Gradescope writes beside the submission; "" (the course's
    own draw) when it is missing or unreadable."""
    try:
        meta = json.loads((root / "submission_metadata.json").read_text()[:1_000_000])
        ids = sorted(str(u["id"]) for u in meta["users"] if isinstance(u, dict) and "id" in u)
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return ",".join(ids)[:200]


def copy_notebook(nb: Path, private: Path) -> tuple[Path | None, str | None]:
    """(a private copy of the notebook, None) or (None, what the student should fix).

    The file is opened once, without following a link, checked to be a regular file on that descriptor,
    and read with a cap; the judge reads the copy, so nothing can swap the file in between.
    """
    try:
        data, _ = files.read_regular(nb, files.MAX_NOTEBOOK_BYTES)
    except OSError as e:
        reason = e.reason if isinstance(e, files.Refused) else f"it could not be read ({e.strerror or e})"
        return None, (f"Your notebook {nb.name} was not graded: {reason}. Upload the notebook file itself "
                      f"(at most {files.MAX_NOTEBOOK_BYTES // 2 ** 20} MiB).")
    copy = private / nb.name
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return copy, None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m attnkit.gradescope ASSIGNMENT", file=sys.stderr)
        return 2
    root = Path(os.environ.get("AUTOGRADER_ROOT", DEFAULT_ROOT))
    registry.use_course(root / "source")           # the zip's course: its autograder/<A>/ and .attnkit/ key
    # stdout goes to the instructor only (stdout_visibility hidden): say which kit graded
    print(f"attnkit kit: {Path(attnkit.__file__).resolve().parent.parent}")
    try:
        data, status = grade_submission(argv[0], root)
    except Exception:  # noqa: BLE001 - whatever broke, Gradescope gets a results.json that says so
        traceback.print_exc()
        data, status = failure_json("The autograder failed on this submission (this is not your fault); "
                                    "your instructor can see why. Please tell them."), 1
    write_results(root / "results" / "results.json", data)
    return status


if __name__ == "__main__":
    sys.exit(main())
