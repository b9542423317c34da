"""The hidden autograder of `attention_lm` (the student's `TeachingAttentionLM`): the plug-in the judge calls (attnkit/toolkit/plugin.py)."""
from attnkit.toolkit.evidence import with_beside
from attnkit.toolkit.plugin import Assignment

from . import checks, evidence, grammar, observed, plan
from .mistakes import MISTAKES


class AttentionLM(Assignment):
    checks = {                                  # manifest.toml's [[checks]] id -> the check
        "forward_matches_details": checks.test_forward_matches_details,
        "no_future_weight": checks.test_no_future_weight,
        "rows_sum_to_one": checks.test_rows_sum_to_one,
        "future_edit": checks.test_future_edit,
        "finite_gradients": checks.test_finite_gradients,
        "tiny_batch_overfit": checks.test_tiny_batch_overfit,
        "padded_keys": checks.test_padded_keys,
        "equivariance": checks.test_equivariance,
        "parameter_count": checks.test_parameter_count,
        "scaling": checks.test_scaling,
        "reference_agreement": checks.test_reference_agreement,
    }
    mistakes = MISTAKES

    def make_plan(self, seed: int):
        return plan.make_plan(seed=seed)

    def evidence(self, results, plan):
        return evidence.gather(results, plan)

    def reproduce(self, results, plan):
        edits = [(grammar.ident(e), grammar.sentence(e)) for e in grammar.reproduce(results, plan)]
        return with_beside(edits, observed.beside(results, plan)) if edits else observed.observed(results, plan)

    def attention_pattern(self, results, plan):
        return evidence.attention_pattern(results, plan)


ASSIGNMENT = AttentionLM()
