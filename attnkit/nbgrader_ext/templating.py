"""The one Jinja2 environment behind every HTML page or fragment the kit makes (the templates in templates/).

Autoescape is on for every template: whatever a template prints with ``{{ }}`` is escaped, so the strings a
student controls (student ids are folder names, the judge's messages quote the submission's own exception
text) are text, never markup. They are never template syntax either: only the files in templates/ are
parsed as templates, values are only printed. Nothing in the kit builds HTML by hand.

Every value printed also passes ``finalize`` (attnkit/engine/terminal.py's ``visible``): a bidi override (U+202E), a
zero-width character or another control character in a student's text shows as its escape (``\\u202e``), so a
TA reads the text as it is, not as it was made to look; newlines and tabs stay (code is preformatted).
"""
from __future__ import annotations

import functools
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"     # attnkit/templates: package data


def one_line(text) -> str:
    """``text`` with its line breaks as spaces, as the report shows them anyway (none of its text is
    preformatted). For the feedback report, which nbgrader puts in a markdown cell: there a blank line in a
    message would end the raw HTML block and hand the rest of the report to markdown (``*`` made emphasis,
    entities decoded, the table torn apart). Plain text out: autoescape still escapes it."""
    return " ".join(str(text).splitlines())


def finalize(value):
    """Control and format characters as their escapes, in plain text and in Markup alike (``join`` under
    autoescape returns Markup of the escaped items; an escape never makes or breaks a tag)."""
    import markupsafe
    from attnkit.engine.terminal import visible
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(visible(value, keep="\n\t"))
    return value if value is None or isinstance(value, (int, float)) else visible(value, keep="\n\t")


@functools.cache
def environment():
    """Made once per process: nbgrader's generate_feedback renders a report per student with it."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             finalize=finalize)
    env.filters["one_line"] = one_line
    return env


def render(template: str, **context) -> str:
    """``templates/<template>`` rendered with ``context``."""
    return environment().get_template(template).render(**context)
