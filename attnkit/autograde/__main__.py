"""python -m attnkit.autograde ASSIGNMENT ... (what `attnkit autograde` runs)."""
import sys

from attnkit.autograde import _cli

sys.exit(_cli())
