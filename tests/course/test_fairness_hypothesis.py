"""Fairness as a property: every correct way of writing attention agrees with torch and keeps full marks.

Over random sizes, causal flags, padding patterns and seeds (hypothesis, derandomized, no database):
the judge's reference and each correct submission of the corpus (the solution cell and every
ALTERNATIVES entry of tests/corpus, executed here from the source the corpus defines) agree with an
oracle - F.scaled_dot_product_attention in float64 on the same float32 weights - within the judge's
float32 tolerance; and graded through the real judge under fresh grading keys (so on judge inputs no
other test sees), they keep every point.
"""
import functools
import os
from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

from autograder.attention_lm import reference as lm_reference
from autograder.causal_head import reference as head_reference
from attnkit.engine import config, registry
from attnkit.isolation import sandbox
from autograder.causal_head.checks import ATOL, RTOL
from attnkit.engine.judge import grade
from autograder.attention_lm import mutants as lm_mutants
from autograder.causal_head import mutants as head_mutants
from tests.corpus_checks import failed
from tests.notebooks import solution_source, submission
from tests.course.test_oracle import sdpa_head, sdpa_lm   # (importing it also keeps hypothesis's cache out of the repo)

IN_PROCESS = settings(max_examples=25, deadline=None, derandomize=True, database=None)
JUDGED = settings(deadline=None, derandomize=True, database=None)


@pytest.fixture(scope="module", autouse=True)
def warm_judges():
    """Both fork servers start importing torch now, while the in-process cases run."""
    for a in ("causal_head", "attention_lm"):
        sandbox.prestart(registry.get(a).driver, config.load(a).contract)


def close(got, want) -> bool:
    """The judge's comparison of float32 attention with a float64 reference."""
    return got.shape == want.shape and torch.allclose(got.double(), want, atol=ATOL, rtol=RTOL)


def sources(corpus, assignment) -> dict:
    """Every correct submission cell of the corpus: the solution, then each alternative."""
    solution = corpus.PREAMBLE + solution_source(assignment, corpus.SOLUTION_CELL)
    return {"solution": solution, **{n: corpus.alternative(n) for n in corpus.ALTERNATIVES}}


HEADS, LMS = sources(head_mutants, "causal_head"), sources(lm_mutants, "attention_lm")


@functools.cache
def defined(source: str, name: str):
    """The class ``name`` that the cell ``source`` defines, as a notebook kernel would run it."""
    namespace = {}
    exec(compile(source, "<corpus cell>", "exec"), namespace)
    return namespace[name]


# ---- in process: each correct head against the oracle ----------------------------------------------------

def head_case(seed, B, T, d, d_head, temperature=1.0):
    """float32 input and query/key/value weights, as the judge hands them to a Head."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, d, generator=g)
    return x, {n: torch.randn(d_head, d, generator=g) * temperature / d**0.5 for n in ("query", "key", "value")}


def head_agrees(head_class, x, w, T_max, causal) -> bool:
    """A Head built from ``head_class``, given the weights ``w``: output and self.A close to the oracle's."""
    d_head, d = w["query"].shape
    head = head_class(d, d_head, T_max, causal=causal)
    with torch.no_grad():
        for n, weight in w.items():
            getattr(head, n).weight.copy_(weight)
        out = head(x.clone())
        A = head.A
        head.eval()                 # the same after .eval() (the contract: no randomness; the judge compares it)
        out_eval = head(x.clone())
    want_out, want_A = sdpa_head(x.double(), *(w[n].double() for n in ("query", "key", "value")), causal)
    return close(out, want_out) and close(A, want_A) and close(out_eval, want_out) and close(head.A, want_A)


def reference_head(d, d_head, T_max, causal=True):
    """The judge's float64 reference, as a Head."""
    head = torch.nn.Module()
    for n in ("query", "key", "value"):
        setattr(head, n, torch.nn.Linear(d, d_head, bias=False))

    def forward(x):
        out, head.A = head_reference.head_forward(x, head.query.weight, head.key.weight, head.value.weight, causal=causal)
        return out
    head.forward = forward
    return head


@IN_PROCESS
@given(seed=st.integers(0, 2**32 - 1), B=st.integers(1, 3), T=st.integers(1, 10), spare=st.integers(0, 3),
       d=st.integers(1, 12), d_head=st.integers(1, 12), causal=st.booleans(), temperature=st.sampled_from([0.5, 1, 3]))
def test_every_correct_head_agrees_with_the_oracle(seed, B, T, spare, d, d_head, causal, temperature):
    x, w = head_case(seed, B, T, d, d_head, temperature)
    assert head_agrees(reference_head, x, w, T + spare, causal), "reference"
    for name, src in HEADS.items():             # T_max > T: the mask must be sliced
        assert head_agrees(defined(src, "Head"), x, w, T + spare, causal), name


def agreement_or_false(agreement) -> bool:
    """``agreement()``, where a submission that cannot even run on the case (it raises) does not agree."""
    try:
        return agreement()
    except Exception:  # noqa: BLE001 - a crash at these sizes is a disagreement, as it is for the judge
        return False


# one call per fresh head here: a mistake that shows only from a head's second call on is the state checks' to see
STATEFUL = {"kept_from_first_call", "buffer_changed_by_forward"}
HEAD_CAUGHT = sorted(n for n, m in head_mutants.MUTANTS.items() if "reference_agreement" in m.fails and n not in STATEFUL)


@pytest.mark.filterwarnings("ignore:Implicit dimension choice for softmax")   # a mistake's own call
@pytest.mark.parametrize("mistake", HEAD_CAUGHT)
def test_the_head_comparison_rejects_a_mistake(mistake):
    """Negative control: each mistake the judge's reference_agreement catches disagrees with the oracle here too."""
    src = head_mutants.PREAMBLE + head_mutants.mutate(solution_source("causal_head", "head"), mistake)
    x, w = head_case(seed=5, B=2, T=6, d=8, d_head=4, temperature=2.0)
    head_class = defined(src, "Head")
    assert not agreement_or_false(lambda: all(head_agrees(head_class, x, w, 8, causal) for causal in (True, False)))


# ---- in process: each correct language model against the oracle ------------------------------------------

@st.composite
def lm_cases(draw):
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 8))
    sizes = dict(vocab_size=draw(st.integers(2, 12)), d_model=draw(st.integers(1, 8)), d_k=draw(st.integers(1, 8)),
                 d_v=draw(st.integers(1, 8)), hidden=draw(st.integers(1, 8)))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), T=T, spare=draw(st.integers(0, 3)),
                pad_id=draw(st.integers(0, sizes["vocab_size"] - 1)),
                left_pads=draw(st.lists(st.integers(0, T - 1), min_size=B, max_size=B)),   # last slot real
                sizes=sizes)


def lm_inputs(seed, T, spare, pad_id, left_pads, sizes):
    """float32 weights by the contract's parameter names, and left-padded windows (as the notebook builds them)."""
    g = torch.Generator().manual_seed(seed)
    V, d_model, d_k, d_v, hidden = (sizes[k] for k in ("vocab_size", "d_model", "d_k", "d_v", "hidden"))
    shapes = {"token_embedding.weight": (V, d_model), "position_embedding.weight": (T + spare, d_model),
              "W_Q.weight": (d_k, d_model), "W_K.weight": (d_k, d_model), "W_V.weight": (d_v, d_model),
              "W_O.weight": (d_model, d_v), "hidden_layer.weight": (hidden, d_model), "hidden_layer.bias": (hidden,),
              "vocab_head.weight": (V, hidden), "vocab_head.bias": (V,)}
    sd = {k: torch.randn(*s, generator=g) * (2 / s[-1] ** 0.5 if len(s) > 1 else 0.1) for k, s in shapes.items()}
    sd["token_embedding.weight"][pad_id] = 0.0                             # as nn.Embedding(padding_idx) keeps it
    ids = torch.randint(0, V - 1, (len(left_pads), T), generator=g)
    ids = ids + (ids >= pad_id).long()                                     # real tokens: any id but pad_id
    for row, n in enumerate(left_pads):
        ids[row, :n] = pad_id
    return sd, ids


def lm_disagreements(lm_class, case) -> list:
    """What of forward_details (every row, padded queries included) and forward differs from the oracle."""
    sd, ids = lm_inputs(**case)
    want = sdpa_lm(ids, {k: v.double() for k, v in sd.items()}, case["pad_id"])
    model = lm_class(context_len=case["T"] + case["spare"], pad_id=case["pad_id"], **case["sizes"])
    model.eval()                           # as the notebook's helpers and the judge read a model (dropout is allowed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in sd.items():
            params[k].copy_(v)
        details = model.forward_details(ids.clone())
        got = {k: details[k] for k in ("weights", "contextual", "logits_all")}
        got["logits"] = model(ids.clone())                                # forward: the last query only
    return [k for k, v in got.items() if not close(v, want[k])]


def reference_lm(vocab_size, context_len, d_model, d_k, d_v, hidden, pad_id):
    """The judge's float64 reference, as a model: its weights are the contract's parameters."""
    model = torch.nn.Module()
    shapes = {"token_embedding": (vocab_size, d_model), "position_embedding": (context_len, d_model),
              "W_Q": (d_k, d_model), "W_K": (d_k, d_model), "W_V": (d_v, d_model), "W_O": (d_model, d_v),
              "hidden_layer": (hidden, d_model), "vocab_head": (vocab_size, hidden)}
    for n, s in shapes.items():
        sub = torch.nn.Module()
        sub.weight = torch.nn.Parameter(torch.empty(s))
        if n in ("hidden_layer", "vocab_head"):
            sub.bias = torch.nn.Parameter(torch.empty(s[0]))
        setattr(model, n, sub)
    model.forward_details = lambda ids: lm_reference.lm_forward_details(
        ids, dict(model.named_parameters()), pad_id)
    model.forward = lambda ids: model.forward_details(ids)["logits"]
    return model


@IN_PROCESS
@given(case=lm_cases())
def test_every_correct_lm_agrees_with_the_oracle(case):
    assert lm_disagreements(reference_lm, case) == [], "reference"
    for name, src in LMS.items():
        assert lm_disagreements(defined(src, "TeachingAttentionLM"), case) == [], name


LM_CAUGHT = sorted(n for n, m in lm_mutants.MUTANTS.items() if "reference_agreement" in m.fails)
# d_k != d_model (scaling by the model width is visible), d_v == d_model (a missing W_O still runs), padding
LM_CONTROL = dict(seed=9, T=6, spare=1, pad_id=0, left_pads=[2, 0, 5],
                  sizes=dict(vocab_size=11, d_model=8, d_k=4, d_v=8, hidden=10))


@pytest.mark.parametrize("mistake", LM_CAUGHT)
def test_the_lm_comparison_rejects_a_mistake(mistake):
    """Negative control: each mistake the judge's reference_agreement catches disagrees with the oracle here too."""
    src = lm_mutants.PREAMBLE + lm_mutants.mutate(solution_source("attention_lm", "lm"), mistake)
    assert not agreement_or_false(lambda: lm_disagreements(defined(src, "TeachingAttentionLM"), LM_CONTROL) == [])


# ---- through the real judge, under fresh grading keys: full marks -----------------------------------------

def graded(assignment, corpus, src, key: bytes) -> dict:
    # ATTNKIT_GRADING_KEY is read in the judge's process only (the child's environment is scrubbed)
    with mock.patch.dict(os.environ, {"ATTNKIT_GRADING_KEY": key.hex()}):
        return grade(submission(assignment, {corpus.SOLUTION_CELL: src}), assignment)


def assert_full_marks(r, name):
    assert failed(r) == set() and r["score"] == r["max_score"] > 0, \
        (name, [c["message"] for c in r["checks"] if not c["passed"]])


@settings(JUDGED, max_examples=6)               # a Head grades in about a second once the judge is warm
@given(key=st.binary(min_size=32, max_size=32), name=st.sampled_from(sorted(HEADS)))
def test_a_correct_head_keeps_full_marks_on_fresh_inputs(key, name):
    assert_full_marks(graded("causal_head", head_mutants, HEADS[name], key), name)


@settings(JUDGED, max_examples=2)               # an LM grade trains a tiny model: several seconds each
@given(key=st.binary(min_size=32, max_size=32), name=st.sampled_from(sorted(LMS)))
def test_a_correct_lm_keeps_full_marks_on_fresh_inputs(key, name):
    assert_full_marks(graded("attention_lm", lm_mutants, LMS[name], key), name)


def test_a_fresh_key_gives_no_points_away():
    """Negative control: the same grading path, under a fresh key, still costs a subtle mistake its points."""
    src = head_mutants.mutate(solution_source("causal_head", "head"), "divide_by_dk")
    with pytest.raises(AssertionError):
        assert_full_marks(graded("causal_head", head_mutants, src, bytes(range(32))), "divide_by_dk")
