"""Hidden checks for the `attention_lm` assignment (the student's `TeachingAttentionLM`)."""
from pathlib import Path

from . import checks
from .evidence import attention_pattern, gather as evidence
from .plan import make_plan

DRIVER = Path(__file__).with_name("drive.py")
__all__ = ["attention_pattern", "checks", "evidence", "make_plan", "DRIVER"]
