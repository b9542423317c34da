"""`attnkit new NAME`: a new assignment folder, as a small worked example of every part the kit reads.

The example is a row-wise softmax (`softmax_rows`): one solution region, one visible and one hidden check,
two typical mistakes (one per check, so each check is lost alone by some mistake, as `attnkit check`
requires), one correct alternative, and a written answer a TA grades by hand. It releases, grades, selfchecks and joins the demo as it is; the
instructor then replaces it part by part (docs/writing-an-assignment.md).

The files are rendered from templates/scaffold/ (Jinja2); a template's path is the file's, with NAME for the
assignment's name and without ".j2". The folder is written in autograder/ under a hidden temporary name and
renamed into place, so a failed `new` leaves nothing behind.
"""
from __future__ import annotations

import keyword
import os
import re
import shutil
from pathlib import Path

from attnkit.engine import registry
from attnkit.naming import first_use
from attnkit.engine import config
from attnkit.release import source_notebook

TEMPLATES = Path(__file__).parent / "templates" / "scaffold"
NAME_FORM = re.compile(r"[a-z][a-z0-9_]*\Z")
# The example's mistakes. An id is its assignment's own (the kit qualifies it as <assignment>/<id> where
# assignments meet: attnkit/engine/diagnosis.py), so every scaffold may use the same ones.
MISTAKE_IDS = {"over_columns": "normalised_over_columns", "no_max": "no_max_subtracted"}


class ScaffoldError(ValueError):
    """A NAME that cannot become an assignment; the message is one plain sentence."""


def refusal(name: str, root: Path | None = None) -> str | None:
    """Why ``name`` cannot be a new assignment of the kit at ``root``, or None when it can."""
    root = registry.course() if root is None else Path(root)
    if not NAME_FORM.match(name) or keyword.iskeyword(name):
        return (f"{name!r} is not a valid assignment name: use lower-case letters, digits and _, starting with a "
                "letter, and no Python keyword (the name is a Python package under autograder/ and nbgrader's id)")
    for taken in (root / registry.PACKAGE / name, root / registry.PACKAGE / f"{name}.py", root / "source" / name):
        if os.path.lexists(taken):
            return f"{taken.relative_to(root)} already exists: choose another name, or remove it first"
    used = first_use(name)
    if used:        # the kit's code names no assignment (tests/test_registry.py): a word it uses cannot be one
        return f"{name!r} is a name the kit's own code uses ({used}): choose another name"
    return None


def _render(name: str, dest: Path) -> list[Path]:
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)    # Python and TOML, not HTML
    values = {"name": name, "ids": MISTAKE_IDS}
    made = []
    for template in sorted(TEMPLATES.rglob("*.j2")):
        rel = template.relative_to(TEMPLATES).as_posix()
        out = dest / rel[:-len(".j2")].replace("NAME", name)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(env.get_template(rel).render(values))
        made.append(out)
    return made


def create(name: str, root: Path | None = None) -> list[Path]:
    """Make autograder/NAME/ and the link source/NAME; return every path made, relative to ``root``."""
    root = registry.course() if root is None else Path(root)
    import nbformat

    why = refusal(name, root)
    if why:
        raise ScaffoldError(why)
    final = root / registry.PACKAGE / name
    tmp = root / registry.PACKAGE / f".{name}.new"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _render(name, tmp)
        pct = tmp / "source" / f"{name}.pct.py"
        points = config.parse(tmp / "manifest.toml").points_by_cell()
        nbformat.write(source_notebook(pct, points), pct.with_suffix("").with_suffix(".ipynb"))   # the twin nbgrader reads
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    link = root / "source" / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(Path("..") / registry.PACKAGE / name / "source")       # where nbgrader looks
    made = sorted(p.relative_to(root) for p in final.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return made + [link.relative_to(root)]


def next_steps(name: str) -> str:
    steps = [(f"attnkit release {name}",
              f"source/{name}/{name}.ipynb, release/{name}/, solutions/{name}/, the gradebook"),
             (f"attnkit grade solutions/{name}/{name}.ipynb --assignment {name}", "full marks"),
             (f"attnkit selfcheck {name}", "each mistake caught and diagnosed, the alternative not failed"),
             (f"attnkit check {name}", "every invariant: the corpus under 3 keys, ids, the release, the plug-in"),
             ("attnkit demo", "its sample class ([demo] in the manifest) graded by nbgrader, with the others")]
    width = max(len(cmd) for cmd, _ in steps)
    return "\n".join(["next:", *(f"  {cmd:<{width}}  # {why}" for cmd, why in steps),
                      "then make it yours, file by file: docs/writing-an-assignment.md"])
