"""The catalogue of mistakes: big enough, every entry exercised, and silent when it does not know."""
from autograder.diagnosis import CATALOGUE, NO_PATTERN
from tests.corpus import attention_lm, causal_head


def test_catalogue_covers_at_least_twenty_mistakes_each_with_a_corpus_submission():
    assert len(CATALOGUE) >= 20
    ids = {m.id for m in CATALOGUE}
    assert ids == set(causal_head.MISTAKES) | set(attention_lm.MISTAKES)
    for m in CATALOGUE:
        assert m.explanation and m.hint and m.title


def test_no_confident_guess_for_an_unknown_failure(head_results, lm_results):
    for results in (head_results, lm_results):
        failed = [c for c in results["release"]["checks"] if not c["passed"]]
        assert failed and all(c["diagnosis"] == NO_PATTERN for c in failed)
