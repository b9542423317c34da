"""The blind corpus (tests/blind/): submissions written from the seeds and the student's release alone, by a writer
who never saw the kit's corpus, catalogue or checks (tests/blind/README.md). It measures the judge on what it was
not built with, and is kept apart from the catalogue: nothing in autograder/ is tuned by reading it.

Each must get its outcome: a correct alternative keeps full marks; a mistake loses points (unless names.toml says
why the judge cannot see it yet, and then it must still be unseen, so the list stays true); a diagnosis is right
(names.toml lists what names each mistake rightly, written from truth.toml's words) or none, never wrong.
`python bench/blind_corpus.py` prints the same figures."""
import json
import sys

import pytest

from tests.conftest import once_per_run

sys.path.insert(0, str(__import__("tests").KIT_ROOT / "bench"))
import blind_corpus  # noqa: E402

from tests import KIT_ROOT  # noqa: E402

BLIND = KIT_ROOT / "tests" / "blind"
ENTRIES = [(a.name, e) for a in sorted(BLIND.iterdir()) if (a / "truth.toml").exists()
           for e in sorted(blind_corpus.tomllib.loads((a / "truth.toml").read_text()))]


class _Verdicts(dict):
    """{assignment: {entry: verdict}}, each assignment's blind entries graded once per run (whichever worker asks
    first) when it is first read: a worker that needs one assignment's waits for that one only (test_blind_keys
    asks for the LM's while test_blind's worker may still be grading causal_head's)."""
    def __init__(self, tmp_path_factory):
        super().__init__()
        self.factory = tmp_path_factory

    def __missing__(self, assignment):
        def build(folder):
            (folder / "verdicts.json").write_text(json.dumps(blind_corpus.verdicts(BLIND, only=assignment)[assignment]))
        self[assignment] = json.loads((once_per_run(self.factory, f"blind-{assignment}", build) / "verdicts.json")
                                      .read_text())
        return self[assignment]

    def every(self) -> dict:
        return {a: self[a] for a in sorted({a for a, _ in ENTRIES})}


@pytest.fixture(scope="session")
def blind(tmp_path_factory):
    return _Verdicts(tmp_path_factory)


def _names(assignment):
    return blind_corpus.tomllib.loads((BLIND / assignment / "names.toml").read_text())


def test_the_corpus_is_large_enough():
    """The issue's floor: at least 20 mistakes and 8 correct alternatives per assignment."""
    for a in {a for a, _ in ENTRIES}:
        truth = blind_corpus.tomllib.loads((BLIND / a / "truth.toml").read_text())
        kinds = [t["kind"] for t in truth.values()]
        assert kinds.count("mistake") >= 20 and kinds.count("correct") >= 8, (a, len(kinds))
        assert set(_names(a)) == {e for e, t in truth.items() if t["kind"] == "mistake"}, a


@pytest.mark.parametrize("assignment,entry", ENTRIES, ids=[f"{a}/{e}" for a, e in ENTRIES])
def test_each_entry_gets_its_outcome(blind, assignment, entry):
    v = blind[assignment][entry]
    if v["kind"] == "correct":
        assert v["score"] == v["max"], v
        return
    known = _names(assignment)[entry]
    named_wrong = [] if blind_corpus.raised_only(dict(v, right=known.get("right", []))) else \
        [n for n in v["named"] if n not in known.get("right", [])]
    assert named_wrong == [], f"a wrong cause named: {named_wrong} ({v})"
    if "unseen" in known:
        assert v["score"] == v["max"], f"now seen ({v}): remove `unseen` from names.toml"
    else:
        assert v["score"] < v["max"], v


def test_the_figures(blind):
    """What bench/blind_corpus.py prints, from the same verdicts: no correct entry loses, nothing is named wrong."""
    for a, f in blind_corpus.figures(blind.every()).items():
        assert f["full_marks"] == f["correct"] and f["named_wrong"] == 0, (a, f)
        print(a, f)
