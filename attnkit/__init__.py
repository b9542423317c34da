"""attnkit: the instructor's command line around nbgrader and the hidden autograder.

This package orchestrates; what judges lives in `autograder/`.
"""
from pathlib import Path

from . import fast_start  # noqa: F401 - first, before anything imports jsonschema

KIT_ROOT = Path(__file__).resolve().parents[1]
__version__ = "0.1.0"
