"""No re-rolling (issue 22): a bug that shows on some inputs only loses the same checks whatever the key, and
editing a comment or the layout of the class draws no new inputs.

The bug: allowed weights below 2e-3 zeroed after the softmax, rows not renormalised. On random inputs it shows
only when some allowed weight happens to fall below the threshold, so before the judge built inputs to show it
(plan.py's tiny-weights input) and seeded them from the key alone (attnkit/engine/secret.py), it scored 20, 16 or 15
by the draw.
"""
import os
import random
from unittest import mock

from attnkit.engine import secret
from attnkit.engine.judge import grade
from attnkit.mutants import apply_edits, module, solution_source, submission

A = "causal_head"
CORPUS = module(A)
PRUNED = apply_edits(solution_source(A, CORPUS.SOLUTION_CELL), "pruned_weights", CORPUS.VARIANTS["pruned_weights"])
LOSES = set(CORPUS.VARIANTS["pruned_weights"].fails)

# Six edits a student makes between two submissions without touching the maths.
EDITS = [
    lambda s: s.replace("class Head(nn.Module):", "class Head(nn.Module):  # my head"),
    lambda s: s.replace("        A = F.softmax(", "        # the weights\n        A = F.softmax("),
    lambda s: s.replace('"""One causal', '"""My one causal'),
    lambda s: s.replace("q, k, v = self.query(x), self.key(x), self.value(x)",
                        "q, k, v = (self.query(x),\n                   self.key(x), self.value(x))"),
    lambda s: s + "\n# end of my answer\n",
    lambda s: s.replace("    def forward(self, x):", "\n    def forward(self, x):"),
]


def lost(result) -> set:
    return {c["id"] for c in result["checks"] if not c["passed"]}


def _grade(src, key=None):
    env = {"ATTNKIT_GRADING_KEY": key} if key else {}
    with mock.patch.dict(os.environ, env):     # read in the judge's process only, on every grade
        return grade(submission(A, {CORPUS.SOLUTION_CELL: src}), A)


def test_the_pruning_head_loses_the_same_checks_under_ten_keys():
    rng = random.Random(22)
    keys = [rng.randbytes(32).hex() for _ in range(10)]
    verdicts = {key[:8]: lost(_grade(PRUNED, key)) for key in keys}
    assert all(v == LOSES for v in verdicts.values()), verdicts


def test_comments_and_layout_draw_no_new_inputs():
    sources = [edit(PRUNED) for edit in EDITS]
    assert len(set(sources)) == len(EDITS) and PRUNED not in sources          # each edit changed the text
    verdicts = [(lost(r), r["score"]) for r in map(_grade, sources)]
    assert all(v == (LOSES, 20 - 5) for v in verdicts), verdicts


def test_the_seed_depends_on_the_key_the_assignment_and_the_student_only():
    with mock.patch.dict(os.environ, {"ATTNKIT_GRADING_KEY": "11" * 32}):
        one = secret.seed_for(A, "ada")
        assert secret.seed_for(A, "ada") == one and secret.seed_for("attention_lm", "ada") != one
        assert secret.seed_for(A, "ben") != one and secret.seed_for(A) != one          # each classmate: another draw
    with mock.patch.dict(os.environ, {"ATTNKIT_GRADING_KEY": "22" * 32}):
        assert secret.seed_for(A, "ada") != one


def _tensors(assignment, seed):
    from attnkit.engine import registry
    return registry.get(assignment).plugin().make_plan(seed)["tensors"]


def test_every_bit_of_the_seed_draws_other_inputs():
    """issue 29: torch's manual_seed keeps 32 bits, so make_plan(s) was make_plan(s & 0xffffffff): one leaked
    exact value and a search of 2^32 seeds gave every hidden input. Each bit now changes the draw."""
    import torch
    with mock.patch.dict(os.environ, {"ATTNKIT_GRADING_KEY": "33" * 32}):
        seed = secret.seed_for(A, "ada")
    assert seed.bit_length() > 200                                            # the HMAC's whole width
    for assignment in (A, "attention_lm"):
        base = _tensors(assignment, seed)
        for other in (seed & 0xFFFFFFFF, seed ^ (1 << 40), seed ^ (1 << 255)):
            moved = _tensors(assignment, other)
            assert not torch.equal(base["x" if assignment == A else "w.W_Q.weight"],
                                   moved["x" if assignment == A else "w.W_Q.weight"]), (assignment, hex(other))
        again = _tensors(assignment, seed)
        assert all(torch.equal(base[k], again[k]) for k in base)             # and the same seed, the same draw


def test_two_students_with_the_same_bug_lose_the_same_checks_on_their_own_inputs():
    with mock.patch.dict(os.environ, {"ATTNKIT_GRADING_KEY": "44" * 32}):
        verdicts = {who: lost(grade(submission(A, {CORPUS.SOLUTION_CELL: PRUNED}), A, student=who))
                    for who in ("ada", "ben", "cy")}
    assert all(v == LOSES for v in verdicts.values()), verdicts
