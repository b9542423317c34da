"""The judge's float64 reference held against PyTorch's own attention: an oracle the kit did not write.

Every verdict of the judge is computed against each ``autograder/<A>/reference.py``; here that reference is
compared with ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention`` (torch's code, with the
same weights copied in) over random shapes, in float64, to 1e-12 of the tensors' size. Each comparison
is proven able to fail: the known-wrong variants of the reference (the diagnosis catalogue's mistakes,
the LM reference's mistake switches) are rejected by exactly the same comparison.
"""
import tempfile

import pytest
import torch
import torch.nn.functional as F
from hypothesis import configuration, example, given, settings, strategies as st
from torch import nn

from autograder.attention_lm import reference as lm_reference
from autograder.causal_head import reference as head_reference

# database=None still leaves hypothesis caching, at collection, the constants it mines from the kit's modules
# in ./.hypothesis: keep them in a directory of this process's own, removed when it exits
HYPOTHESIS_HOME = tempfile.TemporaryDirectory(prefix="attnkit-hypothesis-")
configuration.set_hypothesis_home_dir(HYPOTHESIS_HOME.name)

F64 = torch.float64
REL = 1e-12        # float64 rounding is ~1e-16 per operation; a few hundred of them stay far below this
CASES = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def deviation(got, want) -> float:
    """Largest difference relative to the reference's size; inf for another shape or any NaN or inf."""
    if got.shape != want.shape or not (torch.isfinite(got).all() and torch.isfinite(want).all()):
        return float("inf")
    if want.numel() == 0:
        return 0.0
    return (got - want).abs().max().item() / max(1.0, want.abs().max().item())


def agrees(got, want) -> bool:
    return deviation(got, want) <= REL


def future(T):
    """True above the diagonal, built here (not with the reference's own causal_mask)."""
    return torch.ones(T, T, dtype=torch.bool).triu(1)


def head_case(seed, B, T, d, d_head, temperature=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, d, generator=g, dtype=F64)
    ws = [torch.randn(d_head, d, generator=g, dtype=F64) * temperature / d**0.5 for _ in range(3)]
    return x, *ws


# ---- oracles: torch's attention with the head's weights ---------------------------------------------------

def sdpa_head(x, wq, wk, wv, causal):
    """(output, weights) from F.scaled_dot_product_attention; the weights as attention applied to the identity."""
    B, T, _ = x.shape
    q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
    eye = torch.eye(T, dtype=F64).expand(B, T, T)
    return (F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            F.scaled_dot_product_attention(q, k, eye, is_causal=causal))


def mha(embed, kdim, vdim, wq, wk, wv):
    """One-head, bias-free nn.MultiheadAttention with the given projections and an identity output projection.

    It scales by 1/sqrt(embed / heads), so its width must be the head's; keys and values may come in wider."""
    m = nn.MultiheadAttention(embed, 1, bias=False, kdim=kdim, vdim=vdim, batch_first=True, dtype=F64)
    with torch.no_grad():
        if m._qkv_same_embed_dim:
            m.in_proj_weight.copy_(torch.cat([wq, wk, wv]))
        else:
            for w, name in ((wq, "q"), (wk, "k"), (wv, "v")):
                getattr(m, f"{name}_proj_weight").copy_(w)
        m.out_proj.weight.copy_(torch.eye(embed))
    return m


def mha_head(x, wq, wk, wv, causal):
    """(output, weights) from nn.MultiheadAttention: queries projected here, keys and values by the module."""
    d_head, d = wq.shape
    m = mha(d_head, d, d, torch.eye(d_head, dtype=F64), wk, wv)
    out, A = m(F.linear(x, wq), x, x, attn_mask=future(x.shape[1]) if causal else None,
               need_weights=True, average_attn_weights=False)
    return out, A[:, 0]


ORACLES = {"sdpa": sdpa_head, "multihead_attention": mha_head}


# ---- the head's reference ---------------------------------------------------------------------------------

@pytest.mark.parametrize("oracle", sorted(ORACLES))
@CASES
@given(seed=st.integers(0, 2**32 - 1), B=st.integers(1, 3), T=st.integers(1, 12), d=st.integers(1, 16),
       d_head=st.integers(1, 16), causal=st.booleans(), temperature=st.sampled_from([0.1, 1.0, 4.0]))
@example(seed=1, B=1, T=1, d=8, d_head=4, causal=True, temperature=1.0)        # T = 1: a single allowed key
@example(seed=2, B=2, T=6, d=5, d_head=5, causal=False, temperature=4.0)       # d = d_head: MHA's packed weights
def test_head_reference_agrees_with_torch(oracle, seed, B, T, d, d_head, causal, temperature):
    x, wq, wk, wv = head_case(seed, B, T, d, d_head, temperature)
    ref_out, ref_A = head_reference.head_forward(x, wq, wk, wv, causal=causal)
    out, A = ORACLES[oracle](x, wq, wk, wv, causal)
    assert deviation(ref_out, out) <= REL and deviation(ref_A, A) <= REL, (deviation(ref_out, out), deviation(ref_A, A))
    # the diagnosis's "correct" weights are the reference too
    assert agrees(head_reference.head_weight_variants(x, wq, wk, wv, causal=causal)["correct"], A)


# A shape where every mistake is visible: d != d_head (model-width scaling), d_head > 1 (d vs sqrt(d)), T > 1.
CONTROL = dict(seed=7, B=2, T=5, d=8, d_head=4)
MISTAKES = sorted(n for n, A in head_reference.head_weight_variants(*head_case(**CONTROL)).items()
                  if n != "correct" and A is not None)


@pytest.mark.parametrize("oracle", sorted(ORACLES))
@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_wrong_head_reference_is_caught(oracle, mistake):
    """Negative control: a reference that made this mistake fails the very comparison above."""
    x, wq, wk, wv = head_case(**CONTROL)
    A_wrong = head_reference.head_weight_variants(x, wq, wk, wv, causal=True)[mistake]
    out_wrong = A_wrong @ F.linear(x, wv)
    out, A = ORACLES[oracle](x, wq, wk, wv, causal=True)
    assert not agrees(A_wrong, A) and not agrees(out_wrong, out)


@pytest.mark.parametrize("oracle", sorted(ORACLES))
@pytest.mark.parametrize("causal", [True, False])
def test_the_causal_flag_is_visible_to_the_oracle(oracle, causal):
    """Negative control: the reference with the flag flipped is rejected."""
    x, wq, wk, wv = head_case(**CONTROL)
    ref_out, ref_A = head_reference.head_forward(x, wq, wk, wv, causal=not causal)
    out, A = ORACLES[oracle](x, wq, wk, wv, causal)
    assert not agrees(ref_A, A) and not agrees(ref_out, out)


# ---- the language model's reference -------------------------------------------------------------------------

def lm_case(seed, B, T, vocab, d_model, d_k, d_v, hidden, pad_id, pads):
    """Weights by the contract's names, and ids with padding wherever ``pads`` (B, T booleans) says."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"token_embedding.weight": (vocab, d_model), "position_embedding.weight": (T, d_model),
              "W_Q.weight": (d_k, d_model), "W_K.weight": (d_k, d_model), "W_V.weight": (d_v, d_model),
              "W_O.weight": (d_model, d_v), "hidden_layer.weight": (hidden, d_model), "hidden_layer.bias": (hidden,),
              "vocab_head.weight": (vocab, hidden), "vocab_head.bias": (vocab,)}
    sd = {k: torch.randn(*s, generator=g, dtype=F64) / s[-1] ** 0.5 for k, s in shapes.items()}
    real = torch.randint(0, vocab - 1, (B, T), generator=g)
    real = real + (real >= pad_id).long()                                   # any id but pad_id
    ids = torch.where(torch.tensor(pads, dtype=torch.bool), torch.full_like(real, pad_id), real)
    return ids, sd


def allowed_keys(ids, pad_id):
    """(B, T, T) True where query i may read key j: not the future, and no padded key for a real query."""
    T = ids.shape[1]
    real = ids != pad_id
    return ~future(T)[None] & (real[:, None, :] | ~real[:, :, None])


def sdpa_lm(ids, sd, pad_id):
    """The one-head LM from torch's parts: F.embedding, F.linear, F.scaled_dot_product_attention, F.relu."""
    T = ids.shape[1]
    X = F.embedding(ids, sd["token_embedding.weight"]) + sd["position_embedding.weight"][:T]
    Q, K, V = (F.linear(X, sd[f"W_{n}.weight"]) for n in "QKV")
    keep = allowed_keys(ids, pad_id)
    eye = torch.eye(T, dtype=F64).expand(ids.shape[0], T, T)
    weights = F.scaled_dot_product_attention(Q, K, eye, attn_mask=keep)
    messages = F.scaled_dot_product_attention(Q, K, V, attn_mask=keep)
    contextual = X + F.linear(messages, sd["W_O.weight"])
    hidden = F.relu(F.linear(contextual, sd["hidden_layer.weight"], sd["hidden_layer.bias"]))
    logits_all = F.linear(hidden, sd["vocab_head.weight"], sd["vocab_head.bias"])
    return dict(weights=weights, messages=messages, contextual=contextual, hidden=hidden,
                logits_all=logits_all, logits=logits_all[:, -1])


def mha_lm_weights(ids, sd, pad_id):
    """nn.MultiheadAttention's weights with key_padding_mask; it masks padded keys for every query, so only
    real query rows are meaningful (a padded query may have no key left: NaN)."""
    T = ids.shape[1]
    X = F.embedding(ids, sd["token_embedding.weight"]) + sd["position_embedding.weight"][:T]
    d_k, d_model = sd["W_K.weight"].shape
    m = mha(d_k, d_model, d_model, torch.eye(d_k, dtype=F64), sd["W_K.weight"], sd["W_K.weight"])   # values: unused
    _, A = m(F.linear(X, sd["W_Q.weight"]), X, X, attn_mask=future(T), key_padding_mask=ids == pad_id,
             need_weights=True, average_attn_weights=False)
    return A[:, 0]


LM_KEYS = ("weights", "messages", "contextual", "hidden", "logits_all", "logits")


@st.composite
def lm_cases(draw):
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 8))
    sizes = dict(vocab=draw(st.integers(2, 12)), d_model=draw(st.integers(1, 8)), d_k=draw(st.integers(1, 8)),
                 d_v=draw(st.integers(1, 8)), hidden=draw(st.integers(1, 8)))
    pads = draw(st.lists(st.lists(st.booleans(), min_size=T, max_size=T), min_size=B, max_size=B))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), B=B, T=T, pad_id=draw(st.integers(0, sizes["vocab"] - 1)),
                pads=pads, **sizes)


LM_CONTROL = dict(seed=3, B=3, T=6, vocab=11, d_model=8, d_k=4, d_v=6, hidden=10, pad_id=0,
                  pads=[[True, True, False, False, False, False], [False] * 6, [True] * 5 + [False]])


@CASES
@given(case=lm_cases())
@example(case=dict(LM_CONTROL, T=1, pads=[[False]] * 3))                       # T = 1
@example(case=dict(LM_CONTROL, pads=[[True] * 6, [False, True] * 3, [False] * 6]))   # all padding; holes
def test_lm_reference_agrees_with_torch(case):
    ids, sd = lm_case(**case)
    ref = lm_reference.lm_forward_details(ids, sd, case["pad_id"])
    want = sdpa_lm(ids, sd, case["pad_id"])
    devs = {k: deviation(ref[k], want[k]) for k in LM_KEYS}
    assert max(devs.values()) <= REL, devs
    real = ids != case["pad_id"]
    assert agrees(ref["weights"][real], mha_lm_weights(ids, sd, case["pad_id"])[real])
    assert torch.equal(torch.isinf(ref["masked_scores"]), ~allowed_keys(ids, case["pad_id"]))


# The reference's own mistake switches (what the diagnosis compares submissions with), each wrong here.
LM_MISTAKES = {"no_padding_mask": dict(pad_mask="none"), "padding_mask_nan_rows": dict(pad_mask="all_queries"),
               "no_future_mask": dict(future=False), "scaled_by_model_width": dict(scale="d_model"),
               "no_scaling": dict(scale="none"), "softmax_over_queries": dict(axis=-2),
               "no_position_rows": dict(positions=False), "no_residual": dict(residual=False),
               "no_relu": dict(relu=False), "first_position": dict(readout=0)}


@pytest.mark.parametrize("mistake", sorted(LM_MISTAKES))
def test_a_wrong_lm_reference_is_caught(mistake):
    """Negative control: the reference with one mistake switched on fails the comparison above."""
    ids, sd = lm_case(**LM_CONTROL)
    wrong = lm_reference.lm_forward_details(ids, sd, 0, **LM_MISTAKES[mistake])
    want = sdpa_lm(ids, sd, 0)
    assert max(deviation(wrong[k], want[k]) for k in LM_KEYS) > REL


def test_a_wrong_lm_weight_is_caught_by_multihead_attention():
    """Negative control for the second oracle: unmasked padded keys differ from MHA on real query rows."""
    ids, sd = lm_case(**LM_CONTROL)
    wrong = lm_reference.lm_forward_details(ids, sd, 0, pad_mask="none")["weights"]
    real = ids != 0
    assert not agrees(wrong[real], mha_lm_weights(ids, sd, 0)[real])
