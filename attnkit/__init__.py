"""attnkit: autograding for nbgrader courses, installed once and used on any course directory.

Layers, each importing only those below it (tests/test_layers.py): the commands (this package's top-level
modules and ``autograde/``) -> ``nbgrader_ext`` (nbgrader's steps, the one patch, inert pages, feedback) ->
``engine`` (judge, manifests, registry, results, diagnosis, the plug-in interface) -> ``isolation`` (everything
that runs untrusted code) -> ``toolkit`` (all a course's autograder/ imports of the kit). docs/architecture.md.
"""
from pathlib import Path

from attnkit import fast_start  # noqa: F401 - first, before anything imports jsonschema

__version__ = "0.1.0"
# The folder that holds this package: in the editable install, the kit's source tree (its pyproject.toml and
# requirements.lock), and what a grading child or the notebook reader puts on sys.path. Never a course.
KIT_SOURCE = Path(__file__).resolve().parents[1]
