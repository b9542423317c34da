"""The hidden autograder of `causal_head` (the student's `Head`): the plug-in the judge calls (attnkit/toolkit/plugin.py)."""
from attnkit.toolkit.evidence import with_beside
from attnkit.toolkit.plugin import Assignment

from . import checks, evidence, grammar, plan
from .mistakes import MISTAKES


class CausalHead(Assignment):
    checks = {                                  # manifest.toml's [[checks]] id -> the check
        "simplex_rows": checks.test_simplex_rows,
        "convex_hull": checks.test_convex_hull,
        "positive_weights": checks.test_positive_weights,
        "lower_triangular": checks.test_lower_triangular,
        "causality_perturbation": checks.test_causality_perturbation,
        "causality_gradient": checks.test_causality_gradient,
        "equivariance": checks.test_equivariance,
        "interface": checks.test_interface,
        "noncausal_unmasked": checks.test_noncausal_unmasked,
        "gradient_flow": checks.test_gradient_flow,
        "scaling": checks.test_scaling,
        "short_sequence": checks.test_short_sequence,
        "mask_buffer": checks.test_mask_buffer,
        "reference_agreement": checks.test_reference_agreement,
    }
    mistakes = MISTAKES

    def make_plan(self, seed: int):
        return plan.make_plan(seed=seed)

    def evidence(self, results, plan):
        return evidence.gather(results, plan)

    def reproduce(self, results, plan):
        edits = [(grammar.ident(e), grammar.sentence(e)) for e in grammar.reproduce(results, plan)]
        return with_beside(edits, grammar.beside(results, plan)) if edits else grammar.observed(results, plan)

    def attention_pattern(self, results, plan):
        return evidence.attention_pattern(results, plan)


ASSIGNMENT = CausalHead()
