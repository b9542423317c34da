"""python -m attnkit.autograde ASSIGNMENT ... (what `attnkit autograde` runs)."""
import sys

from . import _cli

sys.exit(_cli())
