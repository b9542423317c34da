"""`attnkit quickstart COURSE_ID`: a new, empty course, ready for `attnkit new NAME`.

As `nbgrader quickstart COURSE_ID` does, the course is made in a new folder named COURSE_ID in the current
directory, or in the folder ``--course-dir`` names (made, or an existing one that holds no course yet). It gets
nbgrader's configuration with that course id (grading_config/, rendered from the kit's own: the demonstration
course's grading_config/ is the same template with the id "attnkit", tests/test_quickstart.py), an empty
autograder/ and source/, a README and .gitignore, and its grading key in .attnkit/ (engine/secret.py makes it).

The files are rendered from templates/course/ (Jinja2): a template's path is the file's, without ".j2", and
"gitignore" is written as ".gitignore" (a package's data keeps no dotfile reliably).
"""
from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates" / "course"
# nbgrader's course id is a word in URLs, file names and the gradebook: keep it to what all three accept
COURSE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# what makes a folder a course already (nbgrader's or attnkit's): quickstart never writes over one
COURSE_MARKS = ("nbgrader_config.py", "grading_config", "autograder", "source", ".attnkit")


class QuickstartError(ValueError):
    """A course that cannot be made there; the message is one plain sentence."""


def render(course_id: str) -> dict[str, str]:
    """{path in the course: text} of every file the template makes for ``course_id``."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)    # Python, Markdown, gitignore
    values = {"course_id": course_id, "course_id_literal": f'"{course_id}"'}   # COURSE_ID needs no escaping
    out = {}
    for template in sorted(TEMPLATES.rglob("*.j2")):
        rel = template.relative_to(TEMPLATES).as_posix()[:-len(".j2")]
        out[".gitignore" if rel == "gitignore" else rel] = env.get_template(
            template.relative_to(TEMPLATES).as_posix()).render(values)
    return out


def refusal(course_id: str, folder: Path) -> str | None:
    """Why no course ``course_id`` can be made in ``folder``, or None when it can."""
    if not COURSE_ID.match(course_id):
        return (f"{course_id!r} is not a valid course id: use letters, digits, _, . and -, starting with a letter "
                "or digit (nbgrader's course id names the gradebook's course)")
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file: name a folder for the course"
    found = [m for m in COURSE_MARKS if (folder / m).exists() or (folder / m).is_symlink()]
    if found:
        return (f"{folder} already holds a course ({', '.join(found)}): quickstart makes a new course and never "
                "writes over one; name an empty folder with --course-dir")
    return None


def create(course_id: str, folder: Path) -> list[Path]:
    """Make the course ``course_id`` in ``folder``; return every path made, relative to it."""
    folder = Path(folder).absolute()
    why = refusal(course_id, folder)
    if why:
        raise QuickstartError(why)
    files = render(course_id)
    keep = [rel for rel in files if rel in ("README.md", ".gitignore") and (folder / rel).exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        if rel not in keep:                    # an instructor's own README or .gitignore stays theirs
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    (folder / "source").mkdir()
    from attnkit.engine import registry, secret
    registry.use_course(folder)
    key = secret.key_file()
    secret.key_hex()                           # the course's own key, made now: one less first-use surprise
    made = sorted(rel for rel in files if rel not in keep) + ["source/", str(key.relative_to(folder))]
    return [Path(p) for p in made]


def next_steps(course_id: str, folder: Path) -> str:
    here = Path.cwd()
    cd = folder.relative_to(here) if folder.is_relative_to(here) else folder
    return "\n".join(["next:", f"  cd {cd}", "  attnkit new NAME       # a first assignment, as a worked example",
                      "  attnkit doctor         # what the course still lacks", f"then see {cd}/README.md"])
