"""What a TA opens is inert: student HTML is cleaned before a page holds it.

A feedback page and formgrader's notebook view are opened by a TA logged into the course's Jupyter server;
a script a student plants there would run with that TA's session. Everything a student can put in a
notebook reaches those pages through nbconvert's HTMLExporter (nbgrader's ``feedback`` and ``formgrade``
templates), so the course's configuration (grading_config/nbgrader_config.py) hands that exporter three
parts of this module, which formgrader's exporter reads too:

- ``markdown2html`` (a filter): markdown rendered as nbconvert renders it, then cleaned. nbgrader's templates
  override the markdown block and call ``markdown2html`` directly, so nbconvert's own ``sanitize_html``
  never reaches a markdown cell there; cleaning the *rendered* HTML also catches what markdown itself makes
  (``[l](javascript:...)``), which cleaning the source would not.
- ``clean_html`` (a filter): nbconvert's templates pass raw cells and ``text/html`` outputs through it when
  ``HTMLExporter.sanitize_html`` is on; nbconvert's own (bleach, a narrow allowlist) turns headings,
  images and figures into text, the kit's keeps them.
- ``InertOutputs`` (a preprocessor): what a kernel sent that no filter sees: JavaScript, widget views and
  state, SVG, image data and the metadata nbconvert prints into ``<img>`` unquoted (``width=1 onerror=...``).

The cleaner is nh3 (Python bindings of ammonia, the Rust sanitizer): maintained, an HTML5 parser (what a
browser parses is what gets cleaned), and about 20x faster than bleach, which is deprecated. What it keeps
(``clean``): ammonia's default tags (text, headings, lists, tables, images, figures, details, code), their
default attributes, ``id`` on headings (markdown's anchors), ``text-align`` as the only style (markdown's
table alignment), classes from a fixed list (markdown's code highlighting and anchors, the kit's teaching
report), links to http(s), mailto and relative addresses, and ``data:`` images (PNG, JPEG, GIF) in an
``<img src>``. A relative link keeps its address only when it names a type the kit copies for TAs
(``attnkit.isolation.files.PASSIVE_SUFFIXES``): ``[see](evil.html)`` stays as text that leads nowhere. Everything else goes: script and style elements with their content, event handlers,
``javascript:`` and other schemes, iframes, objects, forms, SVG, MathML, ``<base>``, ``<meta>``.

Typeset formulas are the other way in (``\\href{javascript:...}``, ``\\style``, ``\\class``): the MathJax
macros of attnkit/templates/nbconvert/ load MathJax's ``Safe`` extension in both the feedback page and
formgrader.
"""
from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote, urlsplit

import nh3
from jinja2 import pass_context
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from pygments.token import STANDARD_TYPES

from attnkit.isolation.files import passive_reason

# markdown's anchors and code highlighting (pygments' short token classes), and the kit's teaching report
# (templates/feedback_report.html.j2). A class from anywhere else could borrow the page's own layout rules
# (a fixed bar over the page, a hidden panel): it is dropped.
CLASSES = frozenset({"anchor-link", "highlight", *filter(None, STANDARD_TYPES.values()),
                     "attnkit-report", "score", "score-what", "written", "unanswered", "error", "diagnosis",
                     "explains", "pass", "fail", "message", "heatmap", "tex2jax_ignore"})
IMAGE_DATA = re.compile(r"data:image/(png|jpeg|gif)[;,]", re.I)
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


def _passive_link(url: str) -> bool:
    """Whether a link of a student's leads nowhere active: a relative address (formgrader's view resolves it
    under the student's autograded/ folder, which it serves from the Jupyter origin without a sandbox) must name
    a type the kit copies there (``passive_reason``); a bare ``#anchor`` or ``?query`` stays on this page; an
    address with a scheme or a host (http, https, mailto, as ammonia allows) is another page's business, unless it
    climbs with `..` or names formgrader (its files address serves submitted/ from the origin). Read as a
    browser reads it: tabs and newlines dropped, backslashes as slashes, percent-escapes decoded (``evil%2Ehtml``)."""
    parts = urlsplit(re.sub(r"[\t\n\r]", "", url).strip("".join(map(chr, range(33)))).replace("\\", "/"))
    path = unquote(parts.path)
    if parts.scheme or parts.netloc:
        # another page's business, unless it climbs out of where it points (formgrader's files address checks
        # only that a path stays in the course: `..%2F` from autograded/ reaches submitted/, unsandboxed) or
        # points into formgrader at all, which a student's page has no reason to
        segments = unquote(path).split("/")
        return ".." not in segments and "formgrader" not in segments
    path = path
    if not path:
        return True
    last = path.rsplit("/", 1)[-1]
    return bool(last) and passive_reason(last) is None


def _attribute(tag: str, name: str, value: str) -> str | None:
    """ammonia has checked the tag, the attribute's name and a URL's scheme; this decides the rest."""
    if name == "href" and not _passive_link(value):
        return None                                      # the link stays as text, leading nowhere
    if name == "class":
        kept = [c for c in value.split() if c in CLASSES]
        return " ".join(kept) or None
    if name == "id":
        return value if tag in HEADINGS else None
    if value.lstrip().lower().startswith("data:"):         # the one scheme allowed only in one place
        return value if tag == "img" and name == "src" and IMAGE_DATA.match(value.lstrip()) else None
    return value


_TAGS = nh3.ALLOWED_TAGS
_ATTRIBUTES = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()}
_ATTRIBUTES["*"] = {"class", "id", "title", "lang", "dir"}
for cell_tag in ("td", "th"):
    _ATTRIBUTES.setdefault(cell_tag, set()).add("style")
_CLEANER = nh3.Cleaner(tags=_TAGS, clean_content_tags={"script", "style"}, attributes=_ATTRIBUTES,
                       attribute_filter=_attribute, url_schemes={"http", "https", "mailto", "data"},
                       filter_style_properties={"text-align"}, link_rel="noopener noreferrer nofollow")


def clean(html: str) -> str:
    """``html`` with everything that could act removed, ordinary markup kept (the module's docstring says
    what is kept)."""
    return _CLEANER.clean(html)


def clean_html(html) -> str:
    """nbconvert's ``clean_html`` filter, the kit's way (bytes are what nbconvert passes for SVG)."""
    return clean(html.decode("utf-8", "replace") if isinstance(html, bytes) else str(html))


@pass_context
def markdown2html(context, source: str) -> str:
    """nbconvert's ``markdown2html`` (HTMLExporter's, with the cell's attachments), then ``clean``."""
    cell = context.get("cell", {}) or {}
    path = context.get("resources", {}).get("metadata", {}).get("path", "")
    renderer = IPythonRenderer(escape=False, attachments=cell.get("attachments", {}) or {}, embed_images=False,
                               path=path, anchor_link_text="¶", exclude_anchor_links=False)
    return clean(MarkdownWithMath(renderer=renderer).render(source))


# What a page may show of a kernel's output, by MIME type; nbconvert's templates print the rest raw
# (JavaScript, a widget's view) or, for SVG, inline or as a data: URL the page's allowlist does not admit.
SHOWN = frozenset({"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
                   "image/gif"})
RASTER = ("image/png", "image/jpeg", "image/gif")


def _base64(data) -> bool:
    text = "".join(data) if isinstance(data, list) else data
    if not isinstance(text, str):
        return False
    try:
        base64.b64decode(re.sub(r"\s", "", text), validate=True)
        return True
    except (binascii.Error, ValueError):
        return False


def _size(value) -> int | None:
    """A width or height nbconvert prints unquoted into ``<img>``: a whole number of pixels, or nothing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 100_000:
        return None
    return int(value)


def _count(value) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _inert_output(output) -> None:
    if "execution_count" in output and not _count(output["execution_count"]):
        output["execution_count"] = None
    if output.get("output_type") not in ("display_data", "execute_result"):
        return                                  # stream and error outputs are text, escaped by the templates
    data = output.get("data", {})
    for mime in list(data):
        if mime not in SHOWN or (mime in RASTER and not _base64(data[mime])):
            del data[mime]
    if not data:
        data["text/plain"] = "(an output this page does not show: script, widget, SVG or unreadable data)"
    metadata = output.get("metadata", {})
    kept = {}
    for mime in RASTER:
        sizes = metadata.get(mime) if isinstance(metadata.get(mime), dict) else {}
        sizes = {k: _size(sizes.get(k)) for k in ("width", "height")}
        sizes = {k: v for k, v in sizes.items() if v is not None}
        if sizes:
            kept[mime] = sizes
    output["metadata"] = kept


class InertOutputs(Preprocessor):
    """Before an HTML page is made of a notebook: every kernel output reduced to what the page shows inertly,
    the widget state dropped, each raw cell shown as cleaned HTML (``clean_html``) and each cell's tags and id
    reduced to the characters nbformat allows (the templates print them into attributes)."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)         # the widget manager would render its state's HTML live
        for cell in nb.cells:
            if "execution_count" in cell and not _count(cell["execution_count"]):
                cell["execution_count"] = None   # printed raw into the prompt: a kernel can send any value
            if "id" in cell:
                cell["id"] = re.sub(r"[^A-Za-z0-9_-]", "_", str(cell["id"]))[:64] or "cell"
            tags = cell.get("metadata", {}).get("tags")
            if tags is not None:
                cell.metadata["tags"] = [re.sub(r"[^A-Za-z0-9_-]", "_", str(t)) for t in tags] \
                    if isinstance(tags, list) else []
            for output in cell.get("outputs", []):
                _inert_output(output)
        return nb, resources
