"""The visible test cells of `attention_lm` agree with their hidden twins on the kit's corpus.

For every submission of the corpus (the solution, each mistake and variant, each correct alternative),
the notebook's own visible test cells run here on the real story windows, as a student runs them; each
must pass exactly where the hidden check of the same name passes, so a visible cell never tells a
student "OK" about a property the grade then takes away, and never fails one the grade accepts.
Needs the story corpus (ATTNKIT_DATA_DIR), as tests/course/test_wordlm.py does.
"""
import contextlib
import io
import os
import sys
from pathlib import Path

import pytest
import torch

from tests import KIT_ROOT
from attnkit.release import source_notebook
from attnkit.engine import config
from attnkit.mutants import submissions
from tests.corpus_checks import failed
from tests.notebooks import cell

ASSIGNMENT = "attention_lm"
HELPERS = KIT_ROOT / "source" / ASSIGNMENT
CFG = config.load(ASSIGNMENT)
VISIBLE = {c.id: c.cell for c in CFG.checks if c.visible}           # check id -> its visible test cell
# hidden check id -> the cell that teaches its property for no points ("check_<id>"), held to the same agreement
TWINS = {"scaling": "check_scaling"}
SUBMISSIONS = submissions(ASSIGNMENT)
DATA_DIR = os.environ.get("ATTNKIT_DATA_DIR")
needs_data = pytest.mark.skipif(  # in CI the data must be there: a missing corpus fails instead
    not os.environ.get("CI") and not (DATA_DIR and (Path(DATA_DIR) / "stories.txt").is_file()),
    reason="set ATTNKIT_DATA_DIR to the directory holding stories.txt",
)
# Measured, not explained away: the checks agree everywhere else on the corpus. With keys made by W_Q the tiny
# model memorises the judge's 16 random windows but stops at loss 0.17 (> 0.15) on the notebook's 16 story
# windows, which repeat words; the hidden overfit would need story-like data to see it (reported to the lead).
KNOWN_DISAGREEMENTS = {
    ("mistake:lm_key_from_query", "tiny_batch_overfit"),
    # a diagonal masked leaves the first query no key: its NaN row fails the hidden scaling check, which fits every
    # row, while the visible scaling cell reads the finite rows only (the visible row-sum cell catches the NaN)
    ("mistake:lm_diagonal_masked", "scaling"),
    # keys from W_Q: the visible scaling cell rebuilds the scores from X W_Q and X W_K and sees they differ, while
    # the hidden scaling check fits the scale of the scores returned (the hidden reference_agreement catches it)
    ("mistake:lm_key_from_query", "scaling"),
    # trained with the padding mask and evaluated without it (the mask applied only in training mode): the loss after
    # training is over the limit on the notebook's 16 story windows and under it on the judge's 16 (measured); the
    # hidden padded_keys check catches the mask missing in eval mode
    ("mistake:padding_mask_only_in_training", "tiny_batch_overfit"),
}
PREAMBLE = "import math\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\nfrom wordlm import *\n"


@pytest.fixture(scope="module")
def notebook_state():
    """What the notebook has defined when its test cells run: the helpers, the windows, the cells' sources."""
    sys.path.insert(0, str(HELPERS))
    try:
        import wordlm
        corpus = wordlm.build_corpus(None, "smoke")
        X_train, y_train, _ = wordlm.make_all_windows(corpus, 12)["train"]
    finally:
        sys.path.remove(str(HELPERS))
    nb = source_notebook(HELPERS / f"{ASSIGNMENT}.pct.py", config.load(ASSIGNMENT).points_by_cell())
    i = next(k for k, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "lm")
    model_cell = next(c.source for c in nb.cells[i + 1:] if c.cell_type == "code")     # builds model, details
    tests = {check: cell(nb, grade_id).source for check, grade_id in {**VISIBLE, **TWINS}.items()}
    return {"wordlm": wordlm, "corpus": corpus, "X_train": X_train, "y_train": y_train,
            "model_cell": model_cell, "tests": tests}


def run_visible_cells(class_source: str, state) -> dict:
    """check id -> whether its visible cell passed, running the cells in notebook order in one namespace."""
    ns = {"__name__": "__notebook__"}
    sys.modules["wordlm"] = state["wordlm"]                  # what `from wordlm import *` finds beside the notebook
    exec(PREAMBLE, ns)
    ns.update(corpus=state["corpus"], CONTEXT_LEN=12, X_train=state["X_train"], y_train=state["y_train"],
              DEVICE=torch.device("cpu"), SEED=11)
    passed = {}
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            exec(class_source, ns)
            exec(state["model_cell"], ns)
            ready = True
        except Exception:  # noqa: BLE001 - the student's cell raised: every later test cell fails with it
            ready = False
        for check, source in state["tests"].items():
            try:
                exec(source, ns) if ready else None
                passed[check] = ready
            except Exception:  # noqa: BLE001 - an assertion or an error: the visible cell fails
                passed[check] = False
    return passed


@needs_data
@pytest.mark.parametrize("name", sorted(SUBMISSIONS))
def test_visible_cells_agree_with_hidden_twins(name, notebook_state, lm_results):
    source = cell(SUBMISSIONS[name], "lm").source
    visible = run_visible_cells(source, notebook_state)
    hidden_failed = failed(lm_results[name])
    disagree = {c: ("visible passes, hidden fails" if visible[c] else "visible fails, hidden passes")
                for c in {**VISIBLE, **TWINS} if visible[c] == (c in hidden_failed) and (name, c) not in KNOWN_DISAGREEMENTS}
    assert not disagree, disagree
    for known_name, c in KNOWN_DISAGREEMENTS:          # a known case that starts to agree must leave the list
        if known_name == name:
            assert visible[c] != (c not in hidden_failed), f"{name}: {c} agrees now; drop it from KNOWN_DISAGREEMENTS"
