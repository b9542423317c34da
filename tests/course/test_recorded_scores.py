"""Every corpus submission keeps the points per check recorded before the kit's layout changed (issue 14)."""
import json

import pytest

from tests.record_scores import RECORDING, scores


@pytest.fixture(scope="module")
def recorded():
    return json.loads(RECORDING.read_text())


def test_the_recording_covers_every_assignment_and_submission(recorded, head_results, lm_results):
    assert set(recorded) == {"causal_head", "attention_lm"}
    assert set(recorded["causal_head"]) == set(head_results)
    assert set(recorded["attention_lm"]) == set(lm_results)


@pytest.mark.parametrize("assignment", ["causal_head", "attention_lm"])
def test_every_corpus_submission_scores_as_recorded(recorded, head_results, lm_results, assignment):
    now = scores({"causal_head": head_results, "attention_lm": lm_results}[assignment])
    changed = {n: (recorded[assignment].get(n), s) for n, s in now.items() if recorded[assignment].get(n) != s}
    assert not changed, f"{len(changed)} submissions score differently from the recording: {changed}"
