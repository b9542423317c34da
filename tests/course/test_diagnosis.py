"""The catalogue of mistakes: big enough, every entry exercised, and silent when it does not know."""
from attnkit.mutants import module as corpus, solution_source, submission
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
        assert failed and all(c["diagnosis"].startswith(NO_PATTERN) and c["diagnosis_id"] is None for c in failed)
        assert all(c["message"] in c["diagnosis"] for c in failed[:1])     # what was measured, said


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


# ------------------------------------------------------------------ naming by reproduction (the edit grammars)
import types  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


def _head_results(head):
    """What the child would report for a head computed by ``head(x, wq, wk, wv) -> (out, A)``: the causal input, the
    tiny-weights input and the second geometry (the runs the grammar reads)."""
    from autograder.causal_head.plan import make_plan
    plan = make_plan(seed=7)
    t = plan["tensors"]
    runs = {}
    for run, x, w in (("causal", "x", "w"), ("geometry2", "x_g2", "g2")):
        out, A = head(t[x].double(), *(t[f"{w}_{n}"].double() for n in ("query", "key", "value")))
        runs[run] = {"out0": out.float().double(), "A0": A.float().double()}
    out, A = head(t["x_tiny"].double(), *(t[f"w_{n}"].double() for n in ("query", "key", "value")))
    runs["causal"].update({"out5": out.float().double(), "A5": A.float().double()})
    return types.SimpleNamespace(results={k: ({}, v) for k, v in runs.items()}), plan


def _head(diagonal=0, divide=lambda dh, T: dh ** 0.5, after=None):
    """A head written as a student would, independently of the grammar's code: a mask of torch.tril(..., diagonal),
    scores divided by ``divide(d_head, T)``, ``after`` applied to the weights."""
    def head(x, wq, wk, wv):
        q, k, v = x @ wq.T, x @ wk.T, x @ wv.T                    # (B, T, d_head)
        T = x.shape[1]
        s = torch.einsum("bid,bjd->bij", q, k) / divide(k.shape[-1], T)
        s = s.masked_fill(torch.ones(T, T).tril(diagonal) == 0, float("-inf"))
        A = torch.softmax(s, -1)                                  # (B, T, T)
        A = after(A, k.shape[-1]) if after else A
        return A @ v, A
    return head


@pytest.mark.parametrize("head,expected", [
    (_head(diagonal=1), "mask_offset_plus_1"),
    (_head(divide=lambda dh, T: T ** 0.5), "scale_by_length"),
    (_head(divide=lambda dh, T: 4.0), "scale_fixed_4"),
    (_head(divide=lambda dh, T: 1.0, after=lambda A, dh: A / dh ** 0.5), "scale_after_softmax"),
    (_head(divide=lambda dh, T: 1.0, after=lambda A, dh: A / 2.0), None),   # 1/2 is 1/sqrt(d_head) here, not at 9
    (_head(diagonal=1, divide=lambda dh, T: 1.0), "mask_offset_plus_1+no_scale"),
])
def test_a_slip_is_named_by_the_edit_that_reproduces_it(head, expected):
    from autograder.causal_head import ASSIGNMENT
    results, plan = _head_results(head)
    assert [i for i, _ in ASSIGNMENT.reproduce(results, plan)] == ([expected] if expected else [])


def test_the_grammar_names_nothing_it_did_not_reproduce():
    from autograder.causal_head import ASSIGNMENT
    noise = lambda A, dh: A + 1e-3 * torch.rand(A.shape, generator=torch.Generator().manual_seed(0))  # noqa: E731
    for head in (_head(), _head(after=noise)):
        results, plan = _head_results(head)
        assert ASSIGNMENT.reproduce(results, plan) == []


def test_every_grammar_sentence_is_the_kits_own_bounded_text():
    """What a page shows of a reproduced edit: fixed words and the grammar's parameters, one short paragraph."""
    from autograder.attention_lm import grammar as lm
    from autograder.causal_head import grammar as head
    from attnkit.engine.diagnosis import reproduced_text
    for g in (head, lm):
        for e in g.edits():
            text = reproduced_text(g.sentence(e))
            assert 40 < len(text) < 700 and g.ident(e).replace("+", "").replace("_", "").replace(".", "").isalnum()


# Slips of the LM after the attention, of its positions and of forward alone (named since blind set 3 showed them
# unnamed): each edit of the solution as a student writes it, and the id the judge must name it by.


def _lm(*edits):
    from attnkit.mutants import submission
    from tests.notebooks import solution_source
    src = solution_source("attention_lm", corpus("attention_lm").SOLUTION_CELL)
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    return submission("attention_lm", {corpus("attention_lm").SOLUTION_CELL: src})


DETAILS_HIDDEN = "hidden = F.relu(self.hidden_layer(contextual))"
FORWARD_TAIL = "return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))"
LM_SLIPS = {
    "mlp_reads_updates": [(DETAILS_HIDDEN, "hidden = F.relu(self.hidden_layer(updates))"),
                          (FORWARD_TAIL, "return self.vocab_head(F.relu(self.hidden_layer("
                                         "self.W_O(message_last).squeeze(1))))")],
    "relu_before_hidden_layer": [(DETAILS_HIDDEN, "hidden = self.hidden_layer(F.relu(contextual))"),
                                 (FORWARD_TAIL, "return self.vocab_head(self.hidden_layer(F.relu(contextual_last)))")],
    "forward_scale_none": [("scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(self.d_k)",
                            "scores_last = q_last @ K.transpose(-2, -1)")],
    # d_v equals the judge's full window length: only the shorter windows tell these two apart
    "scaled_by_window_length": [("scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)",
                                 "scores = Q @ K.transpose(-2, -1) / math.sqrt(T)"),
                                ("scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(self.d_k)",
                                 "scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(T)")],
    "scaled_by_value_width": [("scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)",
                               "scores = Q @ K.transpose(-2, -1) / math.sqrt(V.shape[-1])"),
                              ("scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(self.d_k)",
                               "scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(V.shape[-1])")],
    "forward_keeps_query_axis": [(FORWARD_TAIL, "return self.vocab_head(F.relu(self.hidden_layer("
                                                "contextual_last)))[:, None, :]")],
    # blind set 7, m33: told "padded keys masked for every query, and NaN rows zeroed", an edit pair of the same
    # numbers that is not what it wrote; the single edit is tried first and says both ways to those numbers
    "padded_query_rows_zeroed": [("weights = F.softmax(masked_scores, dim=-1)",
                                  "weights = F.softmax(masked_scores, dim=-1) * real[:, :, None]")],
    # blind set 11, m15: d_k / 2 is sqrt(d_k) at the judge's d_k = 4; the scaling run's d_k = 9 tells them apart
    "scale_precedence": [("/ math.sqrt(self.d_k)", "/ (self.d_k ** 1/2)")],
    # blind set 10, m20: the values everywhere right, the embeddings' residual path cut (no check saw it before);
    # it loses reference_agreement's gradient comparison alone
    "residual_detached": [("contextual = X + updates", "contextual = X.detach() + updates"),
                          ("contextual_last = X[:, -1, :] +", "contextual_last = X[:, -1, :].detach() +")],
}


@pytest.mark.parametrize("expected", sorted(LM_SLIPS))
def test_an_lm_slip_is_named_by_what_reproduces_it(expected):
    from attnkit.engine.judge import grade
    r = grade(_lm(*LM_SLIPS[expected]), "attention_lm")
    lost = [c for c in r["checks"] if not c["passed"]]
    assert lost and {c["diagnosis_id"] for c in lost} == {expected}, [(c["id"], c["diagnosis"]) for c in lost]
    if expected == "residual_detached":
        assert [c["id"] for c in lost] == ["reference_agreement"] and "gradient" in lost[0]["message"], lost
    if expected == "scale_precedence":
        assert [c["id"] for c in lost] == ["scaling"] and "division by 4.5" in lost[0]["message"], lost


# ------------------------------------------------------------------ two slips in one notebook (issue 32)
@pytest.mark.parametrize("a, pair, named", [
    # the weights' slip and one seen on the module
    ("causal_head", ("mask_upper_triangle", "A_not_detached"), {"mask_upper_triangle", "A_not_detached"}),
    # two seen on the module
    ("causal_head", ("biased_projections", "mask_not_registered"), {"biased_projections", "mask_not_registered"}),
    # an edit pair (the grammar's ids) beats the one catalogue entry that fits part of the numbers
    ("attention_lm", ("no_residual", "no_relu"), {"lm_no_residual", "lm_no_relu"}),
])
def test_two_slips_are_both_named_on_every_failed_check(a, pair, named):
    """A notebook with two slips hears of both: before, the first catalogue entry that fitted was the whole
    diagnosis (blind set 5: five two-slip notebooks told one of their two)."""
    from attnkit.engine.judge import grade
    c = corpus(a)
    src = c.mutate(c.mutate(solution_source(a, c.SOLUTION_CELL), pair[0]), pair[1])
    r = grade(submission(a, {c.SOLUTION_CELL: src}), a)
    failed = [x for x in r["checks"] if not x["passed"]]
    assert failed
    for x in failed:
        assert set(x["diagnosis_id"].split("+")) == named, x
        assert x["diagnosis"].startswith("Two slips") or " and " in x["diagnosis"], x


def _graded_head(old: str, new: str):
    from attnkit.engine import judge
    c = corpus("causal_head")
    sol = solution_source("causal_head", c.SOLUTION_CELL)
    assert old in sol
    return judge.grade(submission("causal_head", {c.SOLUTION_CELL: sol.replace(old, new)}), "causal_head")


def _diagnoses(result) -> set:
    return {(c["diagnosis_id"], c["diagnosis"]) for c in result["checks"] if not c["passed"]}


def test_one_error_that_stops_every_failed_check_is_the_diagnosis_with_its_line():
    """A forward that raises on every run (math never imported; `.T` on a 3-D tensor) was told "no known pattern"
    fourteen times (blind set 6); the error it raised, where, and that line's own text are what was measured."""
    (i, text), = _diagnoses(_graded_head("k.shape[-1]**0.5", "math.sqrt(k.shape[-1])"))
    assert i == "raised_NameError" and "the name `math` is not defined" in text and "math.sqrt(k.shape[-1])" in text
    assert "`.T`" not in text
    (i, text), = _diagnoses(_graded_head("k.transpose(-2, -1)", "k.T"))
    assert i == "raised_RuntimeError" and "q @ k.T" in text and "`.T` reverses every axis" in text


def test_errors_that_differ_between_runs_are_not_one_cause():
    """Two errors, each on its own runs (a short input; a batch of one), single out no line: said as measured."""
    failing = ("B, T, d = x.shape\n"
               "        if T < self.tril.shape[0]:\n            raise ValueError('short')\n"
               "        if B == 1:\n            raise TypeError('one')\n")
    found = _diagnoses(_graded_head("B, T, d = x.shape\n", failing))
    assert found and all(i is None and t.startswith(NO_PATTERN) for i, t in found), found


def test_a_stored_A_of_one_matrix_is_named_only_when_it_is_that_matrix():
    for made in ("A[0]", "A.mean(0)"):
        (i, text), = _diagnoses(_graded_head("self.A = A.detach()", f"self.A = {made}.detach()"))
        assert i == "A_one_matrix" and "forward's output is right" in text, made
    found = _diagnoses(_graded_head("self.A = A.detach()", "self.A = A[1].detach()"))
    assert found and all(i is None for i, _ in found), found


def test_one_line_that_raises_other_sentences_at_other_lengths_is_one_error():
    """`Q @ K.T` in the LM fails at every window length but the batch size, with one of two of torch's sentences
    (a product of the wrong shapes, sizes that do not match) by length: one type at one line is one error."""
    from attnkit.engine import judge
    lm = solution_source("attention_lm", "lm")
    assert lm.count("Q @ K.transpose(-2, -1)") == 1
    result = judge.grade(submission("attention_lm", {"lm": lm.replace("Q @ K.transpose(-2, -1)", "Q @ K.T")}),
                         "attention_lm")
    (i, text), = _diagnoses(result)
    assert i == "raised_RuntimeError" and "`scores = Q @ K.T / math.sqrt(self.d_k)`" in text, text
    assert "`.T` reverses every axis" in text and 0 < result["score"] < result["max_score"]


def test_one_line_that_stopped_every_lost_check_is_named_though_another_raised_on_one_input():
    """A mask sliced by the batch size raises at the mask on every input but the one whose batch size fits it,
    where the product raises instead (blind set 7): every lost check names the mask's line, so that is the error."""
    (i, text), = _diagnoses(_graded_head("B, T, d = x.shape\n", "B, T, d = x.shape\n        T = x.size(0)\n"))
    assert i == "raised_RuntimeError" and text.startswith("Every check you lost") and "self.tril[:T, :T]" in text, text


def test_an_error_that_stopped_most_lost_checks_is_named_on_those_and_the_rest_say_what_they_measured():
    """Position rows looked up by token id raise IndexError on every window but length 1 (ids there happen to be
    below the context length) where the numbers differ (blind set 7): the error on the checks it stopped, the
    measurement on the other."""
    from attnkit.engine import judge
    lm = solution_source("attention_lm", "lm")
    slip = ("self.position_embedding(positions)[None, :, :]", "self.position_embedding(ids)")   # as set 7 wrote it
    assert lm.count(slip[0]) == 2
    r = judge.grade(submission("attention_lm", {"lm": lm.replace(*slip)}), "attention_lm")
    failed = [c for c in r["checks"] if not c["passed"]]
    stopped = [c for c in failed if c["diagnosis_id"] == "raised_IndexError"]
    # whether the length-1 window raises too depends on the ids drawn: all, or all but the measured one
    assert len(stopped) > len(failed) / 2 and all(c["diagnosis_id"] is None and c["diagnosis"].startswith(NO_PATTERN)
                                                  for c in failed if c not in stopped), failed
    said = stopped[0]["diagnosis"]
    assert said.startswith(f"{len(stopped)} of the {len(failed)} checks you lost" if len(stopped) < len(failed)
                           else "Every check you lost") and "position_embedding(ids)" in said, said
    assert "nn.Embedding raises this" in said, said


class _Stopped:
    """Results whose error stopped the checks whose message holds 'raised X'."""
    def stopping_error(self, lost):
        from attnkit.engine.results import Stop
        return Stop("IndexError", "forward raised IndexError (at cell 4, line 2)", "y = rows[ids]", ("", "line 2"))


class _NothingReproduces:
    def evidence(self, results, plan):
        raise KeyError("none")

    reproduce = evidence


@pytest.mark.parametrize("others, named", [(["differs by 0.5"], True), (["differs by 0.5"] * 2, False),
                                           (["forward raised TypeError (line 9)"], False)])
def test_an_error_is_named_on_the_checks_it_stopped_only_when_they_are_most_and_no_other_raised(others, named):
    from attnkit.engine.judge import _diagnose
    checks = [{"id": f"c{n}", "passed": False, "message": m} for n, m in
              enumerate(["forward raised IndexError (at cell 4, line 2)"] * 2 + others)]
    _diagnose("causal_head", _NothingReproduces(), _Stopped(), {}, checks)
    ids = [c["diagnosis_id"] for c in checks]
    assert ids == (["raised_IndexError"] * 2 + [None] * len(others) if named else [None] * len(checks)), checks
    if named:
        assert checks[0]["diagnosis"].startswith("2 of the 3 checks you lost stopped on the same error"), checks
        assert checks[2]["diagnosis"].startswith(NO_PATTERN) and "differs by 0.5" in checks[2]["diagnosis"]


# blind set 7's unnamed LM slips, in the grammar since (after its measurement)
LM_SLIPS_SET7 = {
    "relu_on_update": [("contextual = X + updates", "contextual = X + F.relu(updates)"),
                       ("contextual_last = X[:, -1, :] + self.W_O(message_last).squeeze(1)",
                        "contextual_last = X[:, -1, :] + F.relu(self.W_O(message_last).squeeze(1))")],
    "positions_reversed": [("positions = torch.arange(T, device=ids.device)",
                            "positions = torch.arange(T - 1, -1, -1, device=ids.device)")],
    "padded_keys_filled_with_zero": [
        ('masked_scores = scores.masked_fill(attention_mask, float("-inf"))',
         'masked_scores = scores.masked_fill(future[None], float("-inf")).masked_fill(padded_key_for_real_query, 0.0)'),
        ('scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], float("-inf"))',
         "scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], 0.0)")],
}


# and those seen on the runs themselves (observed.py), also after set 7's measurement
LM_SLIPS_SET7.update({
    "details_logits_not_last_position": [("logits=logits_all[:, -1, :])", "logits=logits_all.mean(1))")],
    "output_squeezed": [("return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))",
                         "return self.vocab_head(F.relu(self.hidden_layer(contextual_last))).squeeze()")],
    "forward_softmax_over_query_axis": [("F.softmax(scores_last, dim=-1)", "F.softmax(scores_last, dim=1)")],
    # the padded rows of the weights it returns zeroed, what it computes with them left as it was (m51's last cell)
    "padded_query_rows_zeroed": [("", "\n_details = TeachingAttentionLM.forward_details\n"
                                  "def _no_pad_rows(self, ids):\n    out = _details(self, ids)\n"
                                  "    out['weights'] = out['weights'] * ids.ne(self.pad_id)[:, :, None]\n"
                                  "    return out\nTeachingAttentionLM.forward_details = _no_pad_rows\n")],
    "extra_parameters": [("self.W_O = nn.Linear(d_v, d_model, bias=False)",
                          "self.W_O = nn.Linear(d_v, d_model, bias=False)\n        self.t = nn.Parameter(torch.ones(()))")],
})


@pytest.mark.parametrize("expected", sorted(LM_SLIPS_SET7))
def test_an_lm_slip_of_blind_set_7_is_named(expected):
    from attnkit.engine.judge import grade
    edits = LM_SLIPS_SET7[expected]
    src = solution_source("attention_lm", corpus("attention_lm").SOLUTION_CELL)
    for old, new in edits:
        assert old in src, old
        # every occurrence: forward_details and forward alike; "" appends to the cell
        src = src + new if old == "" else src.replace(old, new)
    r = grade(submission("attention_lm", {corpus("attention_lm").SOLUTION_CELL: src}), "attention_lm")
    lost = [c for c in r["checks"] if not c["passed"]]
    assert lost and {c["diagnosis_id"] for c in lost} == {expected}, [(c["id"], c["diagnosis"]) for c in lost]


def test_a_dtype_error_and_a_loss_without_gradient_say_where_to_look():
    """Blind set 8: a mask made with NumPy (float64) raised "tensors of different dtypes" at `W_O(messages)`, a line
    that does not show the cause; a forward under torch.no_grad() was told "a graph used twice, an in-place edit,
    or no gradient". Each now says what torch's own message implies, and where to look."""
    from attnkit.engine import judge
    lm = solution_source("attention_lm", "lm")
    fill = 'masked_scores = scores.masked_fill(attention_mask, float("-inf"))'
    numpy_mask = ('masked_scores = scores + torch.from_numpy(__import__("numpy").where('
                  'attention_mask.numpy(), -float("inf"), 0.0))')
    assert lm.count(fill) == 1
    (i, text), = _diagnoses(judge.grade(submission("attention_lm", {"lm": lm.replace(fill, numpy_mask)}),
                                        "attention_lm"))
    assert i == "raised_RuntimeError" and "tensors of different dtypes" in text, text
    assert "NumPy makes float64 where the model is float32" in text, text
    start = "_, T = ids.shape\n"
    assert lm.count(start) == 1
    no_grad = "with torch.no_grad():\n            return self.forward_details(ids)['logits']\n        " + start
    r = judge.grade(submission("attention_lm", {"lm": lm.replace(start, no_grad)}), "attention_lm")
    lost = {c["id"]: c["diagnosis"] for c in r["checks"] if not c["passed"]}
    assert "the loss has no gradient: nothing it was computed from requires one" in lost["finite_gradients"], lost
    assert "a graph used twice" not in lost["finite_gradients"], lost


def test_a_size_kept_from_context_len_says_where_it_failed(lm_results):
    """Blind set 8: "works only at the full context length" for both a position table added whole and a mask kept
    at context_len; the catalogue entry names the fact and now quotes the error that stopped the shorter windows,
    with its line, which is where the two differ."""
    said = {c["diagnosis"] for c in lm_results["mistake:full_length_only"]["checks"] if not c["passed"]}
    assert said and all(d.startswith("Works only at the full context length.") for d in said), said
    assert all("Where it failed: forward_details raised" in d and "position_embedding.weight" in d for d in said), said


def test_self_A_kept_from_training_is_caught_in_eval_mode_and_named():
    """Blind set 11, m30: self.A assigned only `if self.training` kept every point (the eval-mode calls read the input of
    the train call before them); an eval-mode call on a shorter input shows it, and the same head storing self.A on
    every call keeps every point."""
    from attnkit.engine.judge import grade
    from attnkit.mutants import submission
    from tests.notebooks import solution_source
    src = solution_source("causal_head", "head")
    assert src.count("self.A = A.detach()") == 1
    kept = src.replace("self.A = A.detach()", "if self.training:\n            self.A = A.detach()")
    r = grade(submission("causal_head", {"head": kept}), "causal_head")
    lost = [c for c in r["checks"] if not c["passed"]]
    assert [c["id"] for c in lost] == ["reference_agreement"] and "self.A is not this call's" in lost[0]["message"]
    assert lost[0]["diagnosis_id"] == "A_not_stored_in_eval", lost
    assert grade(submission("causal_head", {"head": src}), "causal_head")["score"] == r["max_score"]


def test_self_A_stored_on_the_first_call_only_is_told_so_not_as_eval_mode():
    """Blind set 12, m16: self.A assigned only when it does not exist yet was told 'not updated in eval mode'; the
    training-mode calls on other inputs left it stale too, and the sentence says so."""
    from attnkit.engine.judge import grade
    from attnkit.mutants import submission
    from tests.notebooks import solution_source
    src = solution_source("causal_head", "head").replace(
        "self.A = A.detach()", "if getattr(self, 'A', None) is None:\n            self.A = A.detach()")
    lost = [c for c in grade(submission("causal_head", {"head": src}), "causal_head")["checks"] if not c["passed"]]
    assert lost and {c["diagnosis_id"] for c in lost} == {"A_stored_once"}, [(c["id"], c["diagnosis_id"]) for c in lost]


# a slip seen in shapes, or in forward_details' arrays against each other, beside the grammar's edit (blind sets 11
# and 12: each pair below was told only its first slip)
SQUEEZED = ("return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))",
            "return self.vocab_head(F.relu(self.hidden_layer(contextual_last))).squeeze()")
D_MODEL_SCALE = ("/ math.sqrt(self.d_k)", "/ math.sqrt(self.token_embedding.embedding_dim)")


@pytest.mark.parametrize("edits, named", [
    ([D_MODEL_SCALE, SQUEEZED], {"scaled_by_model_width", "output_squeezed"}),
    ([(DETAILS_HIDDEN, "hidden = self.hidden_layer(contextual)"),
      ("logits=logits_all[:, -1, :])", "logits=logits_all[:, 0, :])")], {"lm_no_relu", "details_logits_not_last_position"}),
    # each alone: the grammar's edit names nothing beside it, and the shape slip alone is named by itself
    ([D_MODEL_SCALE], {"scaled_by_model_width"}),
    ([SQUEEZED], {"output_squeezed"}),
])
def test_an_lm_pair_with_a_slip_seen_in_shapes_names_both(edits, named):
    from attnkit.engine.judge import grade
    lost = [c for c in grade(_lm(*edits), "attention_lm")["checks"] if not c["passed"]]
    assert lost and {c["diagnosis_id"] for c in lost} == {"+".join(sorted(named, key=lambda i: i in {
        "output_squeezed", "details_logits_not_last_position"}))}, [(c["id"], c["diagnosis_id"]) for c in lost]


@pytest.mark.parametrize("edits, named", [
    ([("/ k.shape[-1]**0.5", "/ x.shape[-1]**0.5"), ("self.tril[:T, :T] == 0", "self.tril == 0")],
     {"scale_by_model_width", "mask_not_sliced"}),
    ([("/ k.shape[-1]**0.5", ""), ("return A @ v", "return (A @ v).squeeze()")], {"no_scale", "output_squeezed"}),
    ([("/ k.shape[-1]**0.5", "/ x.shape[-1]**0.5")], {"scale_by_model_width"}),
])
def test_a_head_pair_with_a_slip_seen_in_shapes_names_both(edits, named):
    from attnkit.engine.judge import grade
    from attnkit.mutants import submission
    from tests.notebooks import solution_source
    src = solution_source("causal_head", "head")
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    lost = [c for c in grade(submission("causal_head", {"head": src}), "causal_head")["checks"] if not c["passed"]]
    assert lost and all(set(c["diagnosis_id"].split("+")) == named for c in lost), [
        (c["id"], c["diagnosis_id"]) for c in lost]


@pytest.mark.parametrize("a, mutant, line", [
    ("attention_lm", "cpu_positions", "self.position_embedding(positions)"),
    ("causal_head", "cpu_mask_in_forward", "torch.tril(torch.ones(T, T))"),
])
def test_a_tensor_made_on_the_cpu_is_told_with_the_line_where_it_met_the_moved_ones(a, mutant, line):
    """Blind sets 10 and 12: "a tensor made on the CPU" without saying which; the line where the moved model's
    tensors met it is the student's own, quoted as a stopping error's line is."""
    from attnkit.engine.judge import grade
    from attnkit.mutants import apply_edits
    c = corpus(a)
    src = apply_edits(solution_source(a, c.SOLUTION_CELL), mutant, c.VARIANTS[mutant])
    lost = [x for x in grade(submission(a, {c.SOLUTION_CELL: src}), a)["checks"] if not x["passed"]]
    assert lost and {x["diagnosis_id"] for x in lost} == {"tensor_made_on_cpu_in_forward"}, lost
    said = lost[0]["diagnosis"]
    assert "that line reads `" in said and line in said.split("that line reads `")[1], said


@pytest.mark.parametrize("edits, named, lost", [
    # blind set 13's m26: no scale, and self.A the masked scores (the grammar's `stored` slot)
    ([("/ k.shape[-1]**0.5", ""), ("self.A = A.detach()", "self.A = scores.detach()")], "no_scale+stored_scores",
     None),
    # blind set 13's m21: the buffer sized by d, right at every T <= T_max, is not named: at the judge's sizes its
    # (8, 8) is also T_max + 2 and 2 * d_head, and one head's buffer is all the judge inspects
    ([("torch.ones(T_max, T_max)", "torch.ones(d, d)")], None, ["mask_buffer"]),
    ([("torch.ones(T_max, T_max)", "torch.ones(T_max + 2, T_max + 2)")], None, ["mask_buffer"]),
])
def test_a_head_slip_of_blind_set_13_is_named(edits, named, lost):
    from attnkit.engine.judge import grade
    from attnkit.mutants import submission
    src = solution_source("causal_head", "head")
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    failed = [c for c in grade(submission("causal_head", {"head": src}), "causal_head")["checks"] if not c["passed"]]
    assert failed and {c["diagnosis_id"] for c in failed} == {named}, [(c["id"], c["diagnosis_id"]) for c in failed]
    assert lost is None or [c["id"] for c in failed] == lost, failed


def test_x_at_a_padding_slot_is_part_of_the_contract():
    """Blind set 13's m15: position rows zeroed at the padding slots changed no real row and kept every point; the
    contract's X has slot t's position row at every slot, padding included."""
    from attnkit.engine.judge import grade
    x = "X = self.token_embedding(ids) + self.position_embedding(positions)[None, :, :]"
    r = grade(_lm((x, x.replace("[None, :, :]", "[None, :, :] * ids.ne(self.pad_id)[..., None]"))), "attention_lm")
    lost = [c for c in r["checks"] if not c["passed"]]
    assert [c["id"] for c in lost] == ["reference_agreement"] and "at a padding slot" in lost[0]["message"], lost
    assert lost[0]["diagnosis_id"] == "pad_slots_without_position_rows", lost


def test_an_additive_mask_of_0_times_inf_is_named_and_every_key_blocked_is_not():
    """Blind sets 10, 12 and 14: `mask.float() * -inf` makes every allowed score NaN (0 * -inf); the masked scores
    forward_details returns show it (NaN where allowed, -inf where blocked). Every key blocked gives all-NaN
    weights too, from -inf everywhere: that is not this slip."""
    from attnkit.engine.judge import grade
    fill = 'masked_scores = scores.masked_fill(attention_mask, float("-inf"))'
    for new, named in ((f'masked_scores = scores + attention_mask.float() * float("-inf")', {"additive_mask_nan"}),
                       ('masked_scores = scores.masked_fill(torch.ones_like(attention_mask), float("-inf"))', None)):
        lost = [c for c in grade(_lm((fill, new)), "attention_lm")["checks"] if not c["passed"]]
        ids = {c["diagnosis_id"] for c in lost}
        assert lost and (ids == named if named else "additive_mask_nan" not in str(ids)), ids
