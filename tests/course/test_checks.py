"""Every assignment's hidden checks, proven both ways on its corpus (autograder/<A>/mutants.py).

Parametrised over the registry: a new assignment is held to all of this with no edit here. What only one
assignment has (its messages, its spellings of a mistake) stays in its own module (test_head_checks.py, ...).
"""
import pytest

from attnkit.engine import config, registry
from attnkit.engine.diagnosis import by_id, catalogue
from attnkit.plugin_shape import isolating
from tests.corpus_checks import failed


def corpus(a):
    return registry.get(a).mutants()


def each(kind):
    return [(a, n) for a in registry.names() for n in sorted(getattr(corpus(a), kind))]


def checks(a) -> set:
    return {c.id for c in config.load(a).checks}


@pytest.mark.parametrize("a", registry.names())
def test_solution_gets_full_marks(graded, a):
    r = graded(a)["solution"]
    assert r["score"] == r["max_score"] == config.load(a).max_score > 0
    assert r["error"] is None and failed(r) == set()


@pytest.mark.parametrize("a", registry.names())
def test_unanswered_release_gets_zero_with_a_plain_reason(graded, a):
    r = graded(a)["release"]
    assert r["score"] == 0 and failed(r) == checks(a)
    assert any("not answered yet" in c["message"] for c in r["checks"])


@pytest.mark.parametrize("a,name", each("MUTANTS"))
def test_mistake_loses_exactly_its_checks(graded, a, name):
    r, m, cfg = graded(a)[f"mistake:{name}"], corpus(a).MUTANTS[name], config.load(a)
    assert failed(r) == m.fails, m.what
    assert r["score"] == cfg.max_score - sum(c.points for c in cfg.checks if c.id in m.fails)


@pytest.mark.parametrize("a,name", each("ALTERNATIVES"))
def test_correct_alternative_loses_nothing(graded, a, name):
    r = graded(a)[f"alternative:{name}"]
    assert failed(r) == set(), [c["message"] for c in r["checks"] if not c["passed"]]


@pytest.mark.parametrize("a", registry.names())
def test_every_check_is_proven_both_ways_and_isolated_by_a_mistake(a):
    """Each check is lost by some mistake, and by one that loses it alone (beside the corpus's ALONGSIDE)."""
    mistakes = corpus(a).MUTANTS
    assert set().union(*(m.fails for m in mistakes.values())) == checks(a)
    alone = isolating(corpus(a), checks(a))
    assert {c for c, names in alone.items() if not names} == set(), alone


@pytest.mark.parametrize("a", registry.names())
def test_points_come_from_the_manifest(graded, a):
    r = graded(a)["solution"]
    assert {c["id"]: c["max_points"] for c in r["checks"]} == {c.id: c.points for c in config.load(a).checks}


@pytest.mark.parametrize("a,name", each("MUTANTS"))
def test_mistake_gets_its_named_diagnosis_and_fits_no_other(graded, a, name):
    r = graded(a)[f"mistake:{name}"]
    for c in r["checks"]:
        if c["passed"]:
            assert c["diagnosis"] is None
        else:
            assert c["diagnosis_id"] == name and c["diagnosis"].startswith(by_id(a)[name].title), c
    # never a confident wrong guess: its own entry first, and no other but those the corpus lists it also fits
    assert r["diagnosis_matches"] == [name, *getattr(corpus(a), "ALSO_FITS", {}).get(name, ())]


@pytest.mark.parametrize("a", registry.names())
def test_correct_submissions_and_variants_fit_only_what_they_should(graded, a):
    for name, v in getattr(corpus(a), "VARIANTS", {}).items():
        named = {m.id for m in catalogue(a)}      # a variant named by reproduction fits no catalogue entry
        assert graded(a)[f"variant:{name}"]["diagnosis_matches"] == ([v.diagnosis] if v.diagnosis in named else []), name
        lost = [c for c in graded(a)[f"variant:{name}"]["checks"] if not c["passed"]]
        assert all(c.get("diagnosis_id") == v.diagnosis for c in lost), (name, lost)
    for name, r in graded(a).items():
        if name.startswith("alternative:") or name == "solution":
            assert r["diagnosis_matches"] == [] and all(c["diagnosis"] is None for c in r["checks"]), name
