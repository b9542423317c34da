# ---
# jupyter:
#   jupytext:
#     formats: ipynb,.pct.py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # A Causal Self-Attention Head
#
# No training this week. The deliverables are Lecture 4's propositions executed as assertions, plus
# pictures of attention matrices on real text. Runs in seconds.
#
# Every assertion below is annotated with the result it verifies.
#
# **Your task.** Fill in `Head.__init__` (Task 4.1a) and `Head.forward` (Task 4.1b). Keep the names:
# later steps and the autograder use them. The cells marked *test* carry points; the visible ones run
# here so you can see what is checked, and the grade comes from the same properties checked again by a
# hidden autograder on inputs you do not see. Do not use `F.scaled_dot_product_attention` or
# `nn.MultiheadAttention`: the point is to build the head yourself.
#
# **What the hidden checks also test, with a visible check each.** A head built for `T_max` tokens must
# work on a shorter window (`T < T_max`), and the scores are divided by $\sqrt{d_{head}}$, the width of
# the queries and keys, not by $\sqrt{d}$, the width of `x`: nanoGPT's `C**-0.5` scales by the embedding
# width `C`, which is the same number only when `d == d_head`. The hidden checks use `d != d_head`.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s41", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4.1 The head
#
# $$\operatorname{Attn}(X)=\operatorname{softmax}\!\Bigl(\operatorname{mask}\bigl(\tfrac{XW_Q(XW_K)^\top}{\sqrt{d_k}}\bigr)\Bigr)XW_V$$
#
# `register_buffer` holds the causal mask as non-parameter state, so it moves with `.to(device)` but is
# not trained. We stash `A` for plotting.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import os, sys
from pathlib import Path
import torch, torch.nn as nn, torch.nn.functional as F
import matplotlib.pyplot as plt

# corpus.py comes with this notebook and sits beside it. tinyshakespeare.txt may come with it too; if
# not, corpus.py (section 4.4) reads it from the folder ATTNKIT_DATA_DIR names, or downloads it beside
# itself. A kernel normally starts in the notebook's folder; one started elsewhere may still know the
# notebook's file (VS Code, Jupyter).
HELPERS = ("corpus.py",)
places = [Path.cwd(), Path(globals().get("__vsc_ipynb_file__", ".")).parent,
          Path(os.environ.get("JPY_SESSION_NAME", ".")).parent]
HERE = next((place for place in places if all((place / name).is_file() for name in HELPERS)), None)
if HERE is None:
    raise FileNotFoundError(f"corpus.py (which comes with this notebook) is not in {Path.cwd()}: run the "
                            f"notebook from its own folder, or put `%cd <its folder>` in a new first cell.")
sys.path.insert(0, str(HERE))          # first, so the helpers beside this notebook win over any namesake
torch.manual_seed(0);                  # the ";" keeps the returned generator object from printing

# %% nbgrader={"grade": false, "grade_id": "head", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Head(nn.Module):
    """One causal self-attention head.

    Task 4.1a (``__init__``): three projections ``self.key``, ``self.query``, ``self.value``, each
    ``nn.Linear(d, d_head, bias=False)``; the flag ``self.causal``; and the causal mask as a buffer
    ``tril`` of shape ``(T_max, T_max)`` with ones on and below the diagonal
    (``self.register_buffer('tril', ...)``), so it is saved and moved with the module but never trained.

    Task 4.1b (``forward``): for ``x`` of shape ``(B, T, d)`` with ``T <= T_max`` and any ``B >= 1`` (with
    ``B = 1`` the output keeps its batch axis, shape ``(1, T, d_head)``)

        Q = x W_Q,  K = x W_K,  V = x W_V                      (B, T, d_head)
        S = Q K^T / sqrt(d_head)                               (B, T, T)
        S_ij = -inf  for j > i   (only if self.causal)          mask BEFORE the softmax
        A = softmax(S) over the last axis (each row sums to 1)  (B, T, T)
        return A V                                             (B, T, d_head)

    and store ``A.detach()`` in ``self.A`` for plotting, on every call (in eval mode too). Use
    ``tril[:T, :T]`` so shorter inputs work.
    Scale by the width of the queries and keys, ``d_head``, not by the width ``d`` of ``x``.

    Your freedoms (the grader accepts each): the mask may hold bool, integer or float values (True or 1 on
    and below the diagonal), and the buffer may be persistent or not (``persistent=False`` keeps it out of
    ``state_dict``); a head built with ``causal=False`` may leave the buffer out; the masked scores may be
    ``-inf`` or a number so negative that ``exp`` gives 0 (``torch.finfo(S.dtype).min`` or ``-1e9``): the
    weights are the same; ``self.A`` may be float32 or float64, but ``forward`` must return float32 for a
    float32 ``x``. ``__init__`` may add
    buffers and modules without parameters, except a ``Dropout`` with ``p > 0`` anywhere in ``forward`` (on
    ``x``, the weights or the output, it makes the head random: the head must be deterministic, and compute
    the same after ``.eval()`` as in training mode); the three projections must stay the only trainable
    parameters.
    """

    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        ### BEGIN SOLUTION
        self.key   = nn.Linear(d, d_head, bias=False)
        self.query = nn.Linear(d, d_head, bias=False)
        self.value = nn.Linear(d, d_head, bias=False)
        self.causal = causal
        self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max)))
        ### END SOLUTION

    def forward(self, x):                                       # x: (B, T, d)
        ### BEGIN SOLUTION
        B, T, d = x.shape
        q, k, v = self.query(x), self.key(x), self.value(x)     # (B, T, d_head) each
        scores = q @ k.transpose(-2, -1) / k.shape[-1]**0.5     # (B, T, T)
        if self.causal:
            scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        A = F.softmax(scores, dim=-1)                           # (B, T, T)
        self.A = A.detach()
        return A @ v                                            # (B, T, d_head)
        ### END SOLUTION


# %%
d, dh, T, B = 32, 16, 8, 4
head = Head(d, dh, T)
x = torch.randn(B, T, d)
out = head(x)
print('out', out.shape, '| A', head.A.shape)

# %% [markdown] nbgrader={"grade": false, "grade_id": "s42", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4.2 The proofs, as assertions

# %% nbgrader={"grade": true, "grade_id": "test_simplex_rows", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Prop 3.1 — rows of A lie in the simplex
head = Head(d, dh, T, causal=True)     # causal=True is also the default: a hidden check builds Head(d, dh, T)
out = head(x)
A = head.A
assert (A >= 0).all(), "Prop 3.1 fails: some attention weight is negative; softmax weights are never negative"
assert torch.allclose(A.sum(-1), torch.ones_like(A.sum(-1)), atol=1e-6), \
    "Prop 3.1 fails: rows of A do not sum to 1; mask with -inf BEFORE the softmax so each row renormalises"
print('Prop 3.1  simplex rows        OK  (max |rowsum-1| < 1e-6)')   # float rounding, not a figure to compare

# %% nbgrader={"grade": true, "grade_id": "test_convex_hull", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Cor 3.2 — output lies in the convex hull of the value vectors
v = x @ head.value.weight.T            # the value vectors X W_V
lo, hi = v.min(dim=1).values, v.max(dim=1).values
assert ((out >= lo[:, None, :] - 1e-6) & (out <= hi[:, None, :] + 1e-6)).all(), \
    "Cor 3.2 fails: an output lies outside the convex hull of the value vectors (weights must be a convex combination)"
print('Cor 3.2   output in conv hull  OK')

# %% nbgrader={"grade": true, "grade_id": "test_positive_weights", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Cor 3.3 — every allowed weight is strictly positive
allowed = torch.tril(torch.ones(T, T)).bool()
assert (A[0][allowed] > 0).all(), \
    "Cor 3.3 fails: a weight on an allowed position (j <= i) is zero; mask only the future, never the diagonal"
print(f'Cor 3.3   allowed weights > 0  OK  (min = {A[0][allowed].min():.2e})')

# %% nbgrader={"grade": true, "grade_id": "test_lower_triangular", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Prop 5.1 — the mask makes A lower-triangular
assert (A.triu(diagonal=1) == 0).all(), \
    "Prop 5.1 fails: A puts weight on future positions (above the diagonal); check the mask's triangle"
print('Prop 5.1  A lower-triangular   OK')

# %% [markdown] nbgrader={"grade": false, "grade_id": "s42_causality", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### Causality, two ways
#
# By perturbation (positions before the change must be **bitwise identical**, not merely close) and by
# gradient — the derivative form of the same statement.

# %% nbgrader={"grade": true, "grade_id": "test_causality_perturbation", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Prop 5.1 by perturbation
r = 10 * torch.randn(B, d)              # a large change, both ways, so a leak shows even in the last bits
for change in (r, -r):
    x2 = x.clone(); x2[:, 5, :] = change
    out2 = head(x2)
    assert torch.equal(out[:, :5, :], out2[:, :5, :]), \
        "causality fails: changing token 5 changed outputs 0-4; an earlier output must not see later tokens"
    assert not torch.allclose(out[:, 5:, :], out2[:, 5:, :]), \
        "changing token 5 left outputs 5.. unchanged: each position must read its own token"
print('Prop 5.1  perturbation test    OK  (positions 0-4 bitwise identical)')

# %% nbgrader={"grade": true, "grade_id": "test_causality_gradient", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Prop 5.1 by gradient
r = 10 * torch.randn(d)                 # a large later token, both ways, so a leak cannot hide in the data
for change in (r, -r):
    xg = x.clone(); xg[0, 7] = change; xg.requires_grad_(True)
    head(xg)[0, 3].sum().backward()
    g = xg.grad[0]                       # (T, d); a leak below 1e-6 of the past's gradient is float rounding
    assert g[4:].abs().max() <= 1e-6 * g[:4].abs().max(), \
        "causality fails: output 3 has a gradient with respect to later tokens"
    assert (g[:4].abs().sum(-1) > 1e-6).all(), "output 3 has zero gradient with respect to an earlier token"
print('Prop 5.1  gradient test        OK  (d out_3 / d x_j = 0 for j > 3, up to float rounding)')

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_short", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### A window shorter than `T_max`
#
# A head is built once for the longest window, `T_max`, and then called on shorter ones (the last
# batch of a text, a prompt while generating). The hidden check `short_sequence` grades this; the cell
# below shows the property on inputs of its own.

# %% nbgrader={"grade": false, "grade_id": "check_short_sequence", "locked": true, "schema_version": 3, "solution": false, "task": false}
# check (no points): a head built for 24 tokens, called on 5 and on 8
short = Head(d, dh, T_max=3 * T, causal=True)
out5 = short(x[:, :5])
assert out5.shape == (B, 5, dh) and short.A.shape == (B, 5, 5), \
    f"on 5 tokens: output {tuple(out5.shape)}, A {tuple(short.A.shape)}; expected (B, 5, d_head) and (B, 5, 5): use tril[:T, :T]"
# position i reads tokens 0..i only, so the first 5 outputs of an 8-token window are the 5-token window's
assert torch.allclose(short(x)[:, :5], out5, atol=1e-6), \
    "the first 5 outputs of an 8-token window differ from those of its first 5 tokens: the mask must be tril[:T, :T]"
print('T < T_max  5 and 8 tokens of 24  OK')

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_lemma45", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### Lemma 4.5 — why the $\sqrt{d_k}$
#
# Raw scores have standard deviation $\sqrt{d_k}$, so without the scaling the softmax saturates to
# one-hot as $d_k$ grows — its Hessian $\operatorname{diag}(p)-pp^\top$ goes numerically to zero and no
# gradient flows through the attention weights.

# %%
print(f"{'d_k':>5} {'raw std':>9} {'sqrt(d_k)':>10} {'scaled std':>11}"
      f" {'max wt raw':>11} {'max wt scaled':>14}")
lemma = []
draw = torch.Generator().manual_seed(45)   # the cell's own draws: the same table whatever cells ran before
for dk in (16, 64, 256):
    q, k = torch.randn(1, T, dk, generator=draw), torch.randn(1, T, dk, generator=draw)
    raw = q @ k.transpose(-2, -1)
    sc = raw / dk**0.5
    lemma.append((dk, raw.std().item(), sc.std().item()))
    assert F.softmax(raw, -1).max() >= F.softmax(sc, -1).max()     # a larger scale only sharpens the softmax
    print(f'{dk:>5} {raw.std():>9.2f} {dk**0.5:>10.1f} {sc.std():>11.2f}'
          f' {F.softmax(raw,-1).max():>11.3f} {F.softmax(sc,-1).max():>14.3f}')
# The claim, not the digits: raw std is about sqrt(d_k), scaled std about 1.
for dk, raw_std, scaled_std in lemma:
    assert 0.7 < raw_std / dk**0.5 < 1.3 and 0.7 < scaled_std < 1.3, (dk, raw_std, scaled_std)

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_lemma45_ref", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The table's digits come from the cell's own random generator, so they are the same whatever you ran
# before it; on any draw, what the cell asserts holds: raw std near $\sqrt{d_k}$, scaled std near 1, and
# the unscaled softmax's largest weight at least the scaled one's, on its way to 1 (saturation) as $d_k$
# grows.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_scaling_check", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The head's own scaling, measured: along one row, $\log A_{ij}$ moves with the raw score
# $q_i\cdot k_j$ with slope $1/\text{scale}$. The hidden check `scaling` grades this with `d != d_head`,
# at two head widths; so does the cell below, on a head of its own with `d_head = 9` (at 4, `d_head / 2`
# would equal $\sqrt{d_\text{head}}$). (The last row is used: no key is in its future.)

# %% nbgrader={"grade": false, "grade_id": "check_scaling", "locked": true, "schema_version": 3, "solution": false, "task": false}
# check (no points): the scores are divided by sqrt(d_head), not by sqrt(d)
slopes = []
for causal in (True, False):
    wide = Head(32, 9, T, causal=causal).eval()   # d = 32, d_head = 9: sqrt(d_head) = 3, sqrt(d) = 5.66, d_head/2 = 4.5
    with torch.no_grad():
        wide.key.weight.copy_(wide.query.weight)  # W_K = W_Q, so the raw score q_i . k_j = q_i . q_j is symmetric
    xw = torch.randn(1, T, 32)
    wide(xw)
    q = xw[0] @ wide.query.weight.T               # (T, 9): the queries, and the keys
    raw = (q @ q.T)[-1].detach()                   # (T,) the last query's raw scores
    a_last = torch.as_tensor(wide.A)[0, -1]        # (T,) its weights
    kept = a_last > 0                              # a weight of 0 has no log
    r, l = raw[kept] - raw[kept].mean(), a_last[kept].log() - a_last[kept].log().mean()
    slopes.append(((r * l).sum() / (r ** 2).sum()).item())
print(f'1/scale measured {slopes[0]:.3f} (causal), {slopes[1]:.3f} (not causal): '
      f'1/sqrt(d_head) = {9**-0.5:.3f}, 1/sqrt(d) = {32**-0.5:.3f}')
assert all(abs(s * 9**0.5 - 1) < 1e-3 for s in slopes), \
    f"the scores are divided by {1 / slopes[0]:.3g} (causal) and {1 / slopes[1]:.3g} (not causal), expected " \
    "sqrt(d_head) = 3 for both: scale by the width of the queries and keys (d_head ** 0.5: `d_head ** 1/2` is d_head / 2)"

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_ex4", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### Exercise 4 — masking before vs after softmax
#
# Zeroing $A$ after the softmax (instead of $-\infty$ before) destroys row-stochasticity, and with it
# Corollary 3.3's guarantee.

# %%
s = torch.randn(1, T, T)
right = F.softmax(s.masked_fill(torch.tril(torch.ones(T,T))==0, float('-inf')), -1)
wrong = F.softmax(s, -1) * torch.tril(torch.ones(T, T))
print(f'-inf before softmax : row sums {right.sum(-1)[0].min():.3f} '
      f'.. {right.sum(-1)[0].max():.3f}')
print(f'zeroing after       : row sums {wrong.sum(-1)[0].min():.3f} '
      f'.. {wrong.sum(-1)[0].max():.3f}   <- not stochastic')
assert torch.allclose(right.sum(-1), torch.ones(1, T)) and (wrong.sum(-1)[0, :-1] < 1).all()

# %% [markdown] nbgrader={"grade": false, "grade_id": "s43", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4.3 Equivariance — and the trap
#
# Theorem 6.1 is about $\operatorname{Attn}$ as a function of $X$, and it stays true however $X$ was
# built — including after adding positional embeddings. Permuting the rows of $X$ therefore will **not**
# show you the symmetry breaking, and most people set this experiment up that way the first time.
#
# Equivariance is lost one step earlier, in the embedding map $\iota(x)_t = E_{x_t} + p_t$, because the
# positional term does not travel with the permuted token. You must permute *tokens*.

# %% nbgrader={"grade": true, "grade_id": "test_equivariance", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: Thm 6.1 and its corollary: position rows break the symmetry
hn = Head(d, dh, T, causal=False)      # no mask, so S_T acts
perm = torch.randperm(T)

# (a) the layer is equivariant in X ...
assert torch.allclose(hn(x[:, perm, :]), hn(x)[:, perm, :], atol=1e-5), \
    "Thm 6.1 fails: with causal=False, permuting the rows of X must permute the output"
print('Thm 6.1   equivariant in X                     OK')

# (b) ... and STAYS equivariant when X contains positional vectors
xp = x + nn.Embedding(T, d)(torch.arange(T))[None]
assert torch.allclose(hn(xp[:, perm, :]), hn(xp)[:, perm, :], atol=1e-5), \
    "Thm 6.1 fails with position rows inside X: the layer itself must stay equivariant"
print('          still equivariant with pos-emb in X   OK  <- the trap')

# (c) the composite TOKEN -> output: equivariant without positions ...
tok, pos = nn.Embedding(V := 65, d), nn.Embedding(T, d)
idx = torch.randint(0, V, (2, T))      # two token sequences: the permutation must act on each of a batch
P = pos(torch.arange(T))[None]
a1, b1 = hn(tok(idx[:, perm])), hn(tok(idx))[:, perm, :]
assert torch.allclose(a1, b1, atol=1e-5), "Thm 6.1 fails: permuting tokens without positions must permute the output"
print('Thm 6.1   token-perm, NO pos-emb               OK  (diff < 1e-5)')   # float rounding: its digits vary

# (d) ... and BROKEN with them.
a2, b2 = hn(tok(idx[:, perm]) + P), hn(tok(idx) + P)[:, perm, :]
assert not torch.allclose(a2, b2, atol=1e-3), \
    "the symmetry must break with position rows added after the permutation; does the head read the scores' content?"
print(f'          token-perm, WITH pos-emb        BROKEN  '
      f'(diff {(a2-b2).abs().max():.1e})')

# %% [markdown] nbgrader={"grade": false, "grade_id": "q_trap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (2 points, graded by your TA).** In (b) the position rows are inside $X$ and the
# layer stays equivariant; in (d) they are added after the tokens are permuted and the symmetry breaks.
# Explain in three or four sentences why permuting the rows of $X$ cannot reveal the broken symmetry,
# and what exactly must be permuted instead.

# %% [markdown] nbgrader={"grade": true, "grade_id": "written_trap", "locked": false, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# Theorem 6.1 is a statement about the map $X \mapsto \operatorname{Attn}(X)$: for any matrix $X$,
# permuting its rows permutes the output, whatever the rows contain. Adding position rows only changes
# *which* $X$ we feed in, so row-permuting $X = E + P$ moves each position vector together with its
# token and the theorem still applies. The symmetry is broken in the embedding map
# $\iota(x)_t = E_{x_t} + p_t$: when the *token sequence* is permuted, each token receives the position
# vector of its new slot, so $\iota(\pi x) \neq \pi\,\iota(x)$. One must permute the tokens before
# embedding, not the rows after it.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "s44", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4.4 Attention patterns on real text
#
# Untrained weights, five seeds. The structure you see is a prior: row 1 has only one position
# available so $A_{11}=1$ by the simplex constraint, row 2 splits between two, and so on — the mask
# alone forces early positions to carry weight. After training, the same pictures show what the
# head learned to read.
#
# ### Setup: data and tokenizer
#
# A character tokenizer in one compact cell. `corpus.py` (beside this notebook) finds
# `tinyshakespeare.txt` in the directory named by `ATTNKIT_DATA_DIR`, else next to `corpus.py` (where
# your instructor may have put it), downloads it from the char-rnn repository if it is in neither, and
# checks its SHA-256 before anything reads it.

# %%
from corpus import load_text

text = load_text()
vocab = sorted(set(text))
V = len(vocab)
stoi = {ch: i for i, ch in enumerate(vocab)}
itos = {i: ch for i, ch in enumerate(vocab)}
encode = lambda s: [stoi[c] for c in s]
decode = lambda ids: ''.join(itos[i] for i in ids)
ids = torch.tensor(encode(text), dtype=torch.long)

assert len(text) == 1_115_394 and V == 65
print(f'{len(text):,} characters, vocab {V}')

# %%
Tc = 48
tok_emb = nn.Embedding(V, 32)
pos_emb = nn.Embedding(Tc, 32)
idx = ids[:Tc][None, :]
chars = [decode([i]) for i in idx[0].tolist()]
labels = [{'\n': '\\n', ' ': '␣'}.get(c, c) for c in chars]

fig, axes = plt.subplots(1, 5, figsize=(16, 3.4))
for s, ax in enumerate(axes):
    torch.manual_seed(s)
    h = Head(32, 16, Tc)
    xin = tok_emb(idx) + pos_emb(torch.arange(Tc))[None]
    h(xin)
    ax.imshow(h.A[0], cmap='Blues')
    ax.set_title(f'seed {s}', fontsize=10); ax.set_xticks([]); ax.set_yticks([])
plt.suptitle('untrained causal attention, five seeds '
             '(strictly lower-triangular, rows sum to 1)')
plt.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "s45", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4.5 Attention as kernel smoothing
#
# Set $W_Q = W_K = 0$ and attention becomes a running mean; hardwire scores by position,
# $S_{ij} = -(i-j)^2/2s^2$, and it becomes a Gaussian smoother of bandwidth $s$ — i.e. a convolution.
# This is Nadaraya–Watson along the sequence. Content-dependence is the only thing real attention adds
# on top, which is exactly why it is powerful: the 'bandwidth' and 'location' can vary per token and
# per input.

# %%
i = torch.arange(Tc).float()
mask = torch.tril(torch.ones(Tc, Tc))
fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
for ax, s in zip(axes, [0.5, 2.0, 8.0, float('inf')]):
    if s == float('inf'):
        S = torch.zeros(Tc, Tc); title = 'W_Q=W_K=0 (running mean)'
    else:
        S = -(i[:, None] - i[None, :])**2 / (2 * s**2); title = f'bandwidth s={s}'
    Ak = F.softmax(S.masked_fill(mask == 0, float('-inf')), dim=-1)
    ax.imshow(Ak, cmap='Blues'); ax.set_title(title, fontsize=10)
    ax.set_xticks([]); ax.set_yticks([])
plt.suptitle('positional-kernel attention: the degenerate, content-blind case')
plt.tight_layout()
plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_ex7", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### Exercise 7 — rank of the score matrix
#
# $S = QK^\top/\sqrt{d_k}$ factors through $\mathbb R^{d_k}$, so $\operatorname{rank} S \le d_k$
# regardless of $T$. A single head can only produce a low-rank family of patterns — which is the reason
# Lecture 5 runs several in parallel.

# %%
big = Head(64, 8, 32, causal=False)
xb = torch.randn(1, 32, 64)
big(xb)
S = (big.query(xb) @ big.key(xb).transpose(-2, -1))[0]
print(f'score matrix is {tuple(S.shape)} with d_k = 8; '
      f'rank = {torch.linalg.matrix_rank(S).item()}')
assert torch.linalg.matrix_rank(S).item() <= 8

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_hidden", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Hidden checks
#
# The cells below carry the points of checks the autograder runs outside this notebook, on its own
# inputs and weights: the contract (names, shapes, `bias=False`, a detached `self.A`), an unmasked
# non-causal head, gradient reaching the query, key and value weights, the $1/\sqrt{d_{head}}$ scaling (with
# $d \ne d_{head}$), inputs shorter than `T_max`, the mask of a causal head as a buffer, and agreement with a correct head
# given the same weights. Your feedback report names any that fail.

# %% nbgrader={"grade": true, "grade_id": "hidden_interface", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: the contract — projections, causal flag, shapes, dtype, detached A (1 point)

# %% nbgrader={"grade": true, "grade_id": "hidden_noncausal_unmasked", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: a non-causal head is not masked (1 point)

# %% nbgrader={"grade": true, "grade_id": "hidden_gradient_flow", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: gradient reaches the query, key and value weights (1 point)

# %% nbgrader={"grade": true, "grade_id": "hidden_scaling", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: scores divided by sqrt(d_head) (2 points)

# %% nbgrader={"grade": true, "grade_id": "hidden_short_sequence", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: inputs shorter than T_max (1 point)

# %% nbgrader={"grade": true, "grade_id": "hidden_mask_buffer", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: the causal mask of a head built with causal=True is a buffer `tril` (1 point)

# %% nbgrader={"grade": true, "grade_id": "hidden_reference_agreement", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: agreement with a correct head given the same weights (2 points)

# %% [markdown] nbgrader={"grade": false, "grade_id": "outro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# → Next: several heads in parallel, wrapped in residuals and LayerNorm.

# %% nbgrader={"grade": false, "grade_id": "ask_the_check_service", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Optional: check this notebook against the course's hidden checks, a few times an hour. In JupyterLab it
# saves the notebook first; elsewhere it checks the last saved version and says when that was saved.
# It changes no grade. Without a check service set up for you, it says so in one sentence.
from attnkit_check import check
check("causal_head")
