"""The catalogue of mistakes: big enough, every entry exercised, and silent when it does not know."""
from attnkit.mutants import module as corpus
from attnkit.engine import registry
from attnkit.engine.diagnosis import NO_PATTERN, catalogue


def test_catalogue_covers_at_least_twenty_mistakes_each_with_a_corpus_submission():
    assert len(catalogue()) >= 20
    for a in registry.names():
        assert [m.id for m in catalogue(a)] and {m.id for m in catalogue(a)} == set(corpus(a).MUTANTS)
        assert all(m.assignment == a for m in catalogue(a))
    for m in catalogue():
        assert m.explanation and m.hint and m.title


def test_no_confident_guess_for_an_unknown_failure(head_results, lm_results):
    for results in (head_results, lm_results):
        failed = [c for c in results["release"]["checks"] if not c["passed"]]
        assert failed and all(c["diagnosis"] == NO_PATTERN for c in failed)


def test_selfcheck_counts_a_mutant_caught_only_when_it_loses_exactly_its_listed_checks():
    """Issue 13: losing one check more or one fewer than listed is not 'caught' (a check changed what it sees)."""
    from attnkit.selfcheck import verdicts

    def result(lost, diagnosis):
        return {"score": 0.0, "max_score": 20.0, "checks": [
            {"id": c, "passed": c not in lost, "diagnosis_id": diagnosis if c in lost else None}
            for c in ("scaling", "reference_agreement", "interface")]}
    causal_head = corpus("causal_head")
    listed = set(causal_head.MUTANTS["no_scale"].fails)
    assert listed == {"scaling", "reference_agreement"}
    graded = {"mistake:no_scale": result(listed, "no_scale")}
    assert verdicts(causal_head, graded) == ([], [], [])
    for lost in (listed | {"interface"}, {"scaling"}):
        missed, _, _ = verdicts(causal_head, {"mistake:no_scale": result(lost, "no_scale")})
        assert missed and missed[0].startswith("mistake:no_scale (lost"), lost
    _, undiagnosed, _ = verdicts(causal_head, {"mistake:no_scale": result(listed, "divide_by_dk")})
    assert undiagnosed == ["mistake:no_scale (named ['divide_by_dk'])"]
