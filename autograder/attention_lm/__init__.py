"""Hidden checks for the `attention_lm` assignment (the student's `TeachingAttentionLM`)."""
from pathlib import Path

from . import test_lm as checks
from .plan import make_plan

DRIVER = Path(__file__).with_name("drive.py")
__all__ = ["checks", "make_plan", "DRIVER"]
