"""Hidden checks for the `attention_lm` assignment (the student's `TeachingAttentionLM`)."""
from . import checks
from .evidence import attention_pattern, gather as evidence
from .plan import make_plan

__all__ = ["attention_pattern", "checks", "evidence", "make_plan"]
