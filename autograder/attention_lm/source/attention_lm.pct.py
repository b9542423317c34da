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
# # 3 · Causal attention from scratch
#
# This notebook stops exactly at *Attention and language · Part II*: one causal self-attention head,
# Q/K/V projections, scaled scores, causal mask, row-wise softmax, weighted values, output projection,
# residual addition, then a ReLU prediction MLP.
#
# ```text
# token + position rows X
#   ├─→ Q and K → scaled matches → causal mask → row-wise weights A
#   └─→ V ────────────────────────────────→ weighted messages A·V
# message → W_O → contextual update;  X + update → hidden MLP → logits
# ```
#
# There is no `nn.MultiheadAttention`, fused attention call, LayerNorm, multi-head split, stacked block,
# or pretrained embedding. A learned position lookup and AdamW are named practical ingredients used to
# make the experiment trainable.
#
# **Your task.** Implement `TeachingAttentionLM.forward_details` (Task 3.1) and
# `TeachingAttentionLM.forward` (Task 3.2) in Section 3; `__init__` is given, and the class's docstring
# says what you may add to it (buffers, modules without parameters). Keep the names: the
# checks, the training helpers and the autograder call them. The cells marked *test* carry points; the
# visible ones run here so you can see what is checked, and the grade comes from the same properties
# checked again by a hidden autograder on inputs and weights you do not see. Do not use
# `nn.MultiheadAttention`, `F.scaled_dot_product_attention` or `LayerNorm`: the point is to build the
# attention yourself.
#
# **What the hidden checks also test.** The scores are divided by $\sqrt{d_k}$, the width of the queries
# and keys, not by $\sqrt{d_{model}}$: nanoGPT's `C**-0.5` scales by the embedding width `C`, which is the
# same number only when `d_k == d_model` (as in this notebook's model). The hidden checks use
# `d_k != d_model`, and a visible check in Section 4 measures the scaling on such a model.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from pathlib import Path
import json, math, os, sys, time

# wordlm.py and pipeline_maps.py come with this notebook and sit beside it. stories.txt comes from your
# instructor, with the notebook or separately: keep it beside this notebook, or set ATTNKIT_DATA_DIR to
# the folder that holds it (Section 2 reads it). A kernel normally starts in the notebook's folder; one
# started elsewhere may still know the notebook's file (VS Code, Jupyter).
HELPERS = ("wordlm.py", "pipeline_maps.py")
places = [Path.cwd(), Path(globals().get("__vsc_ipynb_file__", ".")).parent,
          Path(os.environ.get("JPY_SESSION_NAME", ".")).parent]
HERE = next((place for place in places if all((place / name).is_file() for name in HELPERS)), None)
if HERE is None:
    raise FileNotFoundError(f"wordlm.py and pipeline_maps.py (which come with this notebook) are not in "
                            f"{Path.cwd()}: run the notebook from its own folder, or put `%cd <its folder>` "
                            f"in a new first cell.")
sys.path.insert(0, str(HERE))          # first, so the helpers beside this notebook win over any namesake

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
import matplotlib.pyplot as plt

from wordlm import *

SEED = 11
seed_everything(SEED)
DEVICE = resolve_device(os.getenv("WORDLM_DEVICE", "auto"))
plt.style.use("seaborn-v0_8-whitegrid")
plt.rcParams["font.family"] = "DejaVu Sans"   # ships with matplotlib: the same figures whatever fonts are installed
print(f"torch={torch.__version__}  device={DEVICE}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_route", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The complete route
#
# The two maps below are our table of contents. Training sends an observed target to the loss.
# Inference appends a chosen token and leaves the model parameters fixed. Later cells highlight the
# same map without rearranging it.
#
# B = batch size, w = context slots, d = embedding width, h = hidden width, C = vocabulary size. In
# generation, B=1.

# %% nbgrader={"grade": false, "grade_id": "route_maps", "locked": true, "schema_version": 3, "solution": false, "task": false}
from pipeline_maps import show_pipeline
show_pipeline('attention', 'training')
show_pipeline('attention', 'inference')

# %% [markdown] nbgrader={"grade": false, "grade_id": "s1", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. Hand-worked tiny tensors
#
# Let rows be token positions. Here $T=4$, $d_{model}=3$, $d_k=2$, and $d_v=2$. Queries and keys
# choose where to read; the resulting weights mix values, which carry what is sent.

# %%
show_pipeline('attention', 'training', ('qkv', 'scores', 'weights', 'message', 'projection', 'residual'))

# %%
X_tiny = torch.tensor([
    [1.0, 0.0, 0.2],
    [0.0, 1.0, 0.1],
    [1.0, 1.0, 0.0],
    [0.5, 1.0, 0.4],
])                                                     # [T=4,d_model=3]
W_Q = torch.tensor([[1.,0.], [0.,1.], [0.5,0.5]])       # [3,2]
W_K = torch.tensor([[1.,0.], [0.,1.], [0.,0.]])         # [3,2]
W_V = torch.tensor([[1.,0.], [0.,1.], [1.,-1.]])        # [3,2]
W_O = torch.tensor([[1.,0.,0.5], [0.,1.,-0.5]])         # [2,3]

Q, K, V = X_tiny @ W_Q, X_tiny @ W_K, X_tiny @ W_V
raw_scores = Q @ K.T
scaled_scores = raw_scores / math.sqrt(Q.shape[-1])
future = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
masked_scores = scaled_scores.masked_fill(future, float("-inf"))
A = F.softmax(masked_scores, dim=-1)
messages = A @ V
updates = messages @ W_O
contextual = X_tiny + updates

for name, tensor in [("X",X_tiny),("Q",Q),("K",K),("V",V),("scores",scaled_scores),
                     ("A",A),("messages",messages),("updates",updates),("X'",contextual)]:
    print(f"{name:9s} shape={tuple(tensor.shape)}")
print("\ncausal weights A:\n", A.round(decimals=3))
assert torch.equal(A[future], torch.zeros_like(A[future]))
assert torch.allclose(A.sum(-1), torch.ones(4))

# %% nbgrader={"grade": false, "grade_id": "check_tiny_weights", "locked": true, "schema_version": 3, "solution": false, "task": false}
# check (no points): the hand-worked weights are the reference matrix, to 3 decimals
expected = torch.tensor([
    [1.000, 0.000, 0.000, 0.000],
    [0.330, 0.670, 0.000, 0.000],
    [0.248, 0.248, 0.503, 0.000],
    [0.152, 0.216, 0.355, 0.277],
])
assert torch.allclose(A, expected, atol=6e-4), f"A differs from the reference weights:\n{A.round(decimals=3)}"
assert torch.equal(A[future], torch.zeros_like(A[future])), "a future position received weight"
assert torch.allclose(A.sum(-1), torch.ones(4)), "a row of A does not sum to 1"
print("tiny weights match the reference  OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "s1_equations", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Each row of $A$ is a probability distribution over allowed source positions. A zero above the
# diagonal means a future value contributes nothing. It is not a zero probability for a vocabulary
# token.
#
# $$Q=XW_Q,\ K=XW_K,\ V=XW_V,$$
# $$S=QK^\top/\sqrt{d_k},\quad A=\operatorname{softmax}_{row}(S+M),$$
# $$H=AV,\quad \Delta X=HW_O,\quad X'=X+\Delta X.$$
#
# Scaling controls score spread; subtracting a softmax maximum handles numerical overflow. They solve
# different problems.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s2", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. Word data and positional information
#
# Attention without position information cannot tell which identical multiset order it received. We
# add a learned position row of the same width as each word embedding. This is an architecture input,
# not a claim that a learned coordinate literally means “position.”

# %%
show_pipeline('attention', 'training', ('tokenize', 'ids', 'windows', 'embedding'))

# %% nbgrader={"grade": false, "grade_id": "data", "locked": true, "schema_version": 3, "solution": false, "task": false}
PROFILE = os.getenv("WORDLM_PROFILE", "smoke")
corpus = build_corpus(profile=PROFILE)          # stories.txt: in $ATTNKIT_DATA_DIR, else beside this notebook
CONTEXT_LEN = 12
windows = make_all_windows(corpus, CONTEXT_LEN)
X_train, y_train, _ = windows["train"]                 # (N, w), (N,)
X_val, y_val, _ = windows["validation"]
X_test, y_test, _ = windows["test"]
print(corpus.audit["documents"], "vocab", len(corpus.vocab.itos), "train targets", len(y_train))

# %% [markdown] nbgrader={"grade": false, "grade_id": "s2_reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Reference (the solution's run with this kit's pinned packages, on a CPU, one thread, smoke profile):
#
# ```text
# {'train': 371, 'validation': 57, 'test': 52} vocab 1500 train targets 67408
# ```
#
# The document split and the vocabulary cap are fixed; the number of targets depends on tokenizer
# details, so with other package versions your count may differ.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s3", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. The complete one-head teaching model
#
# All intermediate tensors are returned by `forward_details` so shapes and claims can be tested. The
# training forward computes only the final causal query, which is exactly the final row of the full
# calculation and avoids producing unused vocabulary logits at earlier rows. The comparison still
# predicts exactly one target per window.

# %%
show_pipeline('attention', 'training', ('embedding', 'qkv', 'scores', 'weights', 'message', 'projection', 'residual', 'readout', 'hidden', 'logits'))


# %% nbgrader={"grade": false, "grade_id": "lm", "locked": false, "schema_version": 3, "solution": true, "task": false}
class TeachingAttentionLM(nn.Module):
    """One causal self-attention head, a residual, and a ReLU MLP that predicts the next word.

    Task 3.1 (``forward_details``): the full calculation, every position, every tensor returned.
    Task 3.2 (``forward``): the training forward, the last query row only.

    Attributes (given in ``__init__``; you may add buffers, a mask say, and modules without parameters,
    but no new parameter: the hidden checks count 331,132 parameters at the notebook's sizes, a vocabulary
    of 1,500 and a context of 12, and want a gradient in each):
        token_embedding: ``nn.Embedding(vocab_size, d_model, padding_idx=pad_id)``
        position_embedding: ``nn.Embedding(context_len, d_model)``, one learned row per slot
        W_Q, W_K: ``nn.Linear(d_model, d_k, bias=False)``
        W_V: ``nn.Linear(d_model, d_v, bias=False)``
        W_O: ``nn.Linear(d_v, d_model, bias=False)``
        hidden_layer: ``nn.Linear(d_model, hidden)``
        vocab_head: ``nn.Linear(hidden, vocab_size)``
        d_k, pad_id, context_len: the sizes and the padding id
    """

    def __init__(self, vocab_size, context_len, d_model=48, d_k=48, d_v=48, hidden=160, pad_id=0):
        super().__init__()
        self.context_len, self.d_k, self.pad_id = context_len, d_k, pad_id
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.position_embedding = nn.Embedding(context_len, d_model)
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_v, bias=False)
        self.W_O = nn.Linear(d_v, d_model, bias=False)
        self.hidden_layer = nn.Linear(d_model, hidden)
        self.vocab_head = nn.Linear(hidden, vocab_size)

    def forward_details(self, ids):
        """Task 3.1: the full one-head calculation at every position.

        Args:
            ids: LongTensor (B, T) of token ids, T <= context_len, left-padded with ``pad_id``,
                on the model's device; any B >= 1. Make every tensor you build here (the
                position ids, masks) on ids.device, so the model still runs after .to(device).
                The model's parameters are float32: no other dtype is asked for.

        Returns:
            dict of tensors, with these keys and shapes:

                X = token_embedding(ids) + position_embedding(0..T-1)   (B, T, d_model)
                    (slot t of the window gets position row t, padding slots included: a window
                    shorter than context_len uses rows 0..T-1 whatever its padding)
                Q = X W_Q,  K = X W_K,  V = X W_V                      (B, T, d_k) / (B, T, d_v)
                scores = Q K^T / sqrt(d_k)                             (B, T, T)
                masked_scores: scores with -inf where key j > query i (the future)
                    and where key j is padding while query i is a real token;
                    the mask is applied BEFORE the softmax              (B, T, T)
                    (a bool mask with masked_fill, or an additive float mask of 0
                    and -inf; kept in a buffer, persistent or not, or built here
                    on ids.device; -inf or a number so negative that exp gives 0,
                    such as -1e9 or torch.finfo(scores.dtype).min: with this
                    mask every row keeps at least its own key, so the weights
                    are the same)
                weights = softmax(masked_scores) over the keys (last axis),
                    so each row sums to 1                               (B, T, T)
                messages = weights V                                    (B, T, d_v)
                updates = W_O(messages)                                 (B, T, d_model)
                contextual = X + updates                                (B, T, d_model)
                hidden = ReLU(hidden_layer(contextual))                 (B, T, hidden)
                logits_all = vocab_head(hidden)                         (B, T, C)
                logits = logits_all[:, -1, :], the last position        (B, C)

        Padded query rows (the rows at a pad slot: its row of weights, and its rows of messages,
        updates, contextual, hidden and logits_all) are not compared with a reference: each row of
        weights must still be finite, sum to 1 and put no weight on the future, so a padded query may
        attend to itself or to the padded keys before it. Real queries put no weight on padded keys. Divide by sqrt(d_k), the width of Q
        and K, not by sqrt(d_model). No dropout is asked for; an nn.Dropout that acts only in training
        mode (p = 0.1, say) is allowed: the hidden checks read the model in eval mode.
        """
        ### BEGIN SOLUTION
        B, T = ids.shape
        positions = torch.arange(T, device=ids.device)                                        # (T,)
        X = self.token_embedding(ids) + self.position_embedding(positions)[None, :, :]        # (B, T, d_model)
        Q, K, V = self.W_Q(X), self.W_K(X), self.W_V(X)                                       # (B, T, d_k), (B, T, d_k), (B, T, d_v)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)                                # (B, T, T)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ids.device), diagonal=1)  # (T, T)
        real = ids.ne(self.pad_id)                                                            # (B, T)
        padded_key_for_real_query = (~real[:, None, :]) & real[:, :, None]                    # (B, T, T)
        attention_mask = future[None, :, :] | padded_key_for_real_query                       # (B, T, T)
        masked_scores = scores.masked_fill(attention_mask, float("-inf"))                     # (B, T, T)
        weights = F.softmax(masked_scores, dim=-1)                                            # (B, T, T)
        messages = weights @ V                                                                # (B, T, d_v)
        updates = self.W_O(messages)                                                          # (B, T, d_model)
        contextual = X + updates                                                              # (B, T, d_model)
        hidden = F.relu(self.hidden_layer(contextual))                                        # (B, T, hidden)
        logits_all = self.vocab_head(hidden)                                                  # (B, T, C)
        return dict(X=X, Q=Q, K=K, V=V, scores=scores, masked_scores=masked_scores,
                    weights=weights, messages=messages, updates=updates, contextual=contextual,
                    hidden=hidden, logits_all=logits_all, logits=logits_all[:, -1, :])        # logits: (B, C)
        ### END SOLUTION

    def forward(self, ids):
        """Task 3.2: the training forward, computed for the final query row only.

        Args:
            ids: LongTensor (B, T) of token ids whose last slot is a real (non-pad) token.

        Returns:
            logits (B, C) for the next word after each window, with the batch axis kept
            when B = 1 (shape (1, C): no bare .squeeze()). Only the last query
            q_T = x_T W_Q is needed: it attends over all T keys and values (none is in its
            future), with padded keys masked to -inf before the softmax, then

                contextual_T = x_T + W_O(softmax(q_T K^T / sqrt(d_k)) V)
                logits = vocab_head(ReLU(hidden_layer(contextual_T)))

            This must equal ``forward_details(ids)["logits"]`` (up to float rounding).
            Returning ``self.forward_details(ids)["logits"]`` is correct and graded as such; it
            computes the T-1 query rows this forward exists to skip.
        """
        ### BEGIN SOLUTION
        _, T = ids.shape
        positions = torch.arange(T, device=ids.device)                                        # (T,)
        X = self.token_embedding(ids) + self.position_embedding(positions)[None, :, :]        # (B, T, d_model)
        q_last, K, V = self.W_Q(X[:, -1:, :]), self.W_K(X), self.W_V(X)                       # (B, 1, d_k), (B, T, d_k), (B, T, d_v)
        scores_last = q_last @ K.transpose(-2, -1) / math.sqrt(self.d_k)                      # (B, 1, T)
        scores_last = scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], float("-inf"))  # (B, 1, T)
        message_last = F.softmax(scores_last, dim=-1) @ V                                     # (B, 1, d_v)
        contextual_last = X[:, -1, :] + self.W_O(message_last).squeeze(1)                     # (B, d_model)
        return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))                    # (B, C)
        ### END SOLUTION


# %%
seed_everything(SEED)
model = TeachingAttentionLM(len(corpus.vocab.itos), CONTEXT_LEN, pad_id=corpus.vocab.pad_id)
details = model.forward_details(X_train[:3])
for name in ["X","Q","K","V","scores","weights","messages","updates","contextual","hidden","logits"]:
    print(f"{name:11s} {tuple(details[name].shape)}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "s3_reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Reference shapes: `X`, `Q`, `K`, `V`, `messages`, `updates`, `contextual` are `(3, 12, 48)`;
# `scores` and `weights` are `(3, 12, 12)`; `hidden` is `(3, 12, 160)`; `logits` is `(3, 1500)`.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s4", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4. Mechanical checks before interpretation
#
# A model that produces a pretty heatmap can still be wrong. We test the mask, normalization axis,
# causality, finite gradients, and ability to overfit 16 targets.

# %%
show_pipeline('attention', 'training', ('weights', 'loss', 'backward'))

# %% nbgrader={"grade": true, "grade_id": "test_forward_matches_details", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: forward is the last row of forward_details
C = len(corpus.vocab.itos)
# a second model whose widths all differ (d_k, d_v != d_model), as the autograder's do: every shape must still fit
odd_model = TeachingAttentionLM(C, CONTEXT_LEN, d_model=16, d_k=8, d_v=12, hidden=20, pad_id=corpus.vocab.pad_id)
assert details["weights"].shape == (3, 12, 12), \
    f"weights has shape {tuple(details['weights'].shape)}, expected (B, T, T) = (3, 12, 12): one row per query, one column per key"
assert details["logits"].shape == (3, C), \
    f"logits has shape {tuple(details['logits'].shape)}, expected (B, C) = (3, {C}): the last position's row of logits_all"
gap = max(forward_details_gap(m, X_train[:3]) for m in (model, odd_model))   # windows cut to every length 1..12
assert gap <= 1e-5, \
    f"forward(ids) differs from forward_details(ids)['logits'] by {gap:.3g} on windows of some length 1..12: the last query must see the same keys, scaling, padded-key mask, residual and MLP"
print("forward == forward_details(...)['logits'] at every length  OK")

# %% nbgrader={"grade": true, "grade_id": "test_no_future_weight", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: no weight on future keys
checks = attention_invariants(model, X_train[:2])      # on the windows cut to every length 1..12
odd_checks = attention_invariants(odd_model, X_train[:2])
# the row-sum error is float rounding: printed as a bound, since its digits vary from machine to machine
print({k: (f"< 1e-5" if k == "max_row_sum_error" and v <= 1e-5 else v) for k, v in checks.items()})
assert checks["max_future_weight"] == 0.0 and odd_checks["max_future_weight"] == 0.0, \
    f"a query puts weight {max(checks['max_future_weight'], odd_checks['max_future_weight']):.3g} on a later key: set scores[j > i] to -inf BEFORE the softmax (torch.triu(..., diagonal=1))"
print("no future weight  OK")

# %% nbgrader={"grade": true, "grade_id": "test_rows_sum_to_one", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: every query's weights sum to 1 (padded queries included) and every tensor is finite
assert checks["all_finite"] and odd_checks["all_finite"], \
    "forward_details returned inf or NaN outside masked_scores: a query row with every key masked becomes NaN (every query, a padded one included, must keep a key)"
assert max(checks["max_row_sum_error"], odd_checks["max_row_sum_error"]) <= 1e-5, \
    f"rows of weights do not sum to 1 (error {max(checks['max_row_sum_error'], odd_checks['max_row_sum_error']):.3g}): take the softmax over the keys (dim=-1), and mask with -inf before it, not zeros after"
print("rows sum to one, all finite  OK")

# %% nbgrader={"grade": true, "grade_id": "test_future_edit", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: editing the last token leaves earlier positions unchanged
assert max(checks["max_earlier_representation_change_after_future_edit"],
           odd_checks["max_earlier_representation_change_after_future_edit"]) < 1e-6, \
    "changing the last token changed `contextual` at an earlier position: information leaks from the future"
print("future edit leaves earlier positions unchanged  OK")

# %% nbgrader={"grade": true, "grade_id": "test_finite_gradients", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: a finite loss, and finite gradients that reach every parameter
grads = gradient_report(model, X_train[:8], y_train[:8])
assert math.isfinite(grads["loss"]), "the loss is not finite: look for a row of scores that is all -inf"
assert not grads["no_gradient"], \
    f"no gradient reaches {', '.join(grads['no_gradient'])}: the parameter is not used by forward (or something is detached)"
assert not grads["not_finite"], \
    f"the gradient of {', '.join(grads['not_finite'])} is inf or NaN: a softmax over an all -inf row gives NaN"
assert not grads["zero_attention"], \
    f"the gradient of {', '.join(grads['zero_attention'])} is exactly zero: the loss does not depend on that part of the attention path"
print(f"finite loss and gradients: {grads['loss']:.3f}")

# %% nbgrader={"grade": true, "grade_id": "test_tiny_batch_overfit", "locked": true, "schema_version": 3, "solution": false, "task": false}
# test: the model can memorise 16 targets
seed_everything(31)
debug_model = TeachingAttentionLM(len(corpus.vocab.itos), CONTEXT_LEN, d_model=32, d_k=32, d_v=32, hidden=96, pad_id=corpus.vocab.pad_id)
before, after = tiny_batch_overfit(debug_model, X_train, y_train, device=DEVICE, steps=220)
print(f"tiny-batch loss: {before:.3f} → {after:.5f}")
assert after < min(0.15, before / 10), \
    f"the loss on 16 windows only fell from {before:.3f} to {after:.3f}: check that the readout uses the last position and that gradients reach every weight"

# %% [markdown] nbgrader={"grade": false, "grade_id": "s4_reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Reference (the solution's run with this kit's pinned packages, on a CPU, one thread, the instruction set
# every x86 processor has):
#
# ```text
# {'max_future_weight': 0.0, 'max_row_sum_error': '< 1e-5', 'max_earlier_representation_change_after_future_edit': 0.0, 'all_finite': True}
# finite loss and gradients: 7.668
# tiny-batch loss: 7.355 → 0.00000
# ```
#
# The row-sum error is float32 rounding, printed as a bound because its digits vary from machine to
# machine; the losses depend on the random initialisation and the hardware; the zeros are exact.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s4_scaling", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The scaling, measured on a model whose widths differ ($d_k = 8$, $d_{model} = 16$): along the last
# query's row, $\log$ weight moves with the raw score $q\cdot k$ with slope $1/\text{scale}$. The hidden
# check `scaling` grades the same property on its own inputs and weights.

# %% nbgrader={"grade": false, "grade_id": "check_scaling", "locked": true, "schema_version": 3, "solution": false, "task": false}
# check (no points): the scores are divided by sqrt(d_k), not by sqrt(d_model)
full = X_train[X_train.ne(corpus.vocab.pad_id).all(-1)][:2]            # windows without padding: (2, 12)
odd_model.eval()                                                       # no dropout, if a model has some
with torch.no_grad():
    d_odd = odd_model.forward_details(full)
    Q = d_odd["X"] @ odd_model.W_Q.weight.T                            # (2, 12, 8) the queries X W_Q
    K = d_odd["X"] @ odd_model.W_K.weight.T                            # (2, 12, 8) the keys X W_K
slopes = []
for raw, w in zip((Q @ K.transpose(-2, -1))[:, -1], d_odd["weights"][:, -1]):   # each window's last query: (12,)
    kept = w > 0                                                       # a weight of 0 has no log
    r, l = raw[kept] - raw[kept].mean(), w[kept].log() - w[kept].log().mean()
    slopes.append(((r * l).sum() / (r ** 2).sum()).item())
print(f"1/scale measured {slopes[0]:.3f}: 1/sqrt(d_k) = {8**-0.5:.3f}, 1/sqrt(d_model) = {16**-0.5:.3f}")
assert all(abs(s * 8**0.5 - 1) < 1e-3 for s in slopes), \
    f"the scores are divided by {1 / slopes[0]:.3g}, expected sqrt(d_k) = {8**0.5:.3g}: scale by the width of Q and K"

# %% [markdown] nbgrader={"grade": false, "grade_id": "q_last_query", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (2 points, graded by your TA).** Why may the training forward compute only the final
# query row, and why is that still exactly the last row of the full calculation? Answer in three or four
# sentences.

# %% [markdown] nbgrader={"grade": true, "grade_id": "written_last_query", "locked": false, "schema_version": 3, "solution": true, "task": false}
# ### BEGIN SOLUTION
# The loss has one target per window, the word after the last slot, so only the last row of
# `logits_all` is ever used; the logits at earlier rows would be computed and thrown away. Every
# operation after the scores acts row by row (softmax over keys, $AV$, $W_O$, the residual, the MLP),
# so the last row of the output depends only on the last query $q_T$ against all keys and values. The
# causal mask removes nothing from that row, because no key lies in the last query's future, and the
# padded keys are masked to $-\infty$ in the same way as in the full calculation. Hence
# $\operatorname{softmax}(q_T K^\top/\sqrt{d_k})V$ is exactly row $T$ of $AV$, and the training forward
# gives the same logits while skipping $T-1$ unused query rows and vocabulary readouts.
# ### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "s5", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 5. Actually train the one-head model
#
# This smoke run uses one target per window—the same loss unit as the MLP. The larger, multi-seed,
# matched-context comparison is beyond this notebook.

# %%
show_pipeline('attention', 'training', ('loss', 'backward', 'optimizer'))

# %%
seed_everything(SEED)
model = TeachingAttentionLM(len(corpus.vocab.itos), CONTEXT_LEN, pad_id=corpus.vocab.pad_id)
config = TrainConfig(steps=300, batch_size=256, learning_rate=3e-3, weight_decay=1e-4,
                     seed=SEED, eval_every=50, eval_examples=20_000)
result, _ = train_model(model, X_train, y_train, X_val, y_val, config, device=DEVICE)
test_loss = evaluate_loss(model, X_test, y_test, device=DEVICE)
print(f"validation CE={result['validation_loss']:.3f}, PPL={math.exp(result['validation_loss']):.2f}")
print(f"test CE={test_loss:.3f}, PPL={math.exp(test_loss):.2f} (after settings were fixed)")
# (the runtime, result['runtime_seconds'], is this machine's alone: not printed, so a re-release changes no byte)
print(f"parameters={count_parameters(model):,}, tokens seen={result['tokens_seen']:,}")
if count_parameters(model) != 331_132:        # a note, not an assert: Run All goes on
    print(f"note: {count_parameters(model):,} parameters, not 331,132: the hidden parameter check will fail")

# %% [markdown] nbgrader={"grade": false, "grade_id": "s5_reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Reference (the solution's run with this kit's pinned packages, `torch=2.13.0+cpu  device=cpu`,
# one thread, the instruction set every x86 processor has):
#
# ```text
# validation CE=4.078, PPL=59.03
# test CE=4.134, PPL=62.42 (after settings were fixed)
# ```
#
# and a third line with the parameters and the tokens seen. The losses and perplexities depend on the
# hardware, the PyTorch build and tokenizer details, so on another machine expect
# nearby digits, not the same ones. The parameter count (331,132 at these sizes) and the tokens
# seen (300 steps × 256 targets = 76,800) are exact.

# %%
trace = result["trace"]
fig, ax = plt.subplots(figsize=(7.2, 3.6))
ax.plot([p["tokens_seen"] for p in trace], [p["train_batch_loss"] for p in trace], "o-", label="train batch")
ax.plot([p["tokens_seen"] for p in trace], [p["validation_loss"] for p in trace], "o-", label="validation")
ax.set(xlabel="supervised target tokens seen", ylabel="cross-entropy (nats)", title="One-head causal attention learning curve")
ax.legend(); plt.show()

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_inference", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### The inference loop on the same map
#
# Reuse the saved tokenizer and vocabulary. Crop long history to the last w tokens, left-pad a shorter
# prefix, predict, choose a token and append it. Stop on `<EOS>` or the token limit. This
# implementation recomputes the window; it does not use a KV cache. No target, backward pass or
# optimizer step is involved.

# %%
show_pipeline('attention', 'inference', ('windows','probabilities','choose','append','stop'))

# %%
for temperature in [0.8, 1.0]:
    print(f"T={temperature:.1f}:", generate_text(
        model, corpus.vocab, "once upon a time", context_len=CONTEXT_LEN,
        max_new_tokens=45, temperature=temperature, seed=8, device=DEVICE,
    ))

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_inference_reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Reference (the solution's run with this kit's pinned packages, on a CPU, one thread, the instruction set
# every x86 processor has):
#
# ```text
# T=0.8: once upon a time, there were two orange nice she reached. she asked the pirate smiled and started to something on. "the sky, and she was his dad. he felt like a fun to we seen at the flute the sun and i'll
# T=1.0: once upon a time mary little boy named lily without boy let's adventure discovery. this brought were small we hairy looks like. first was so happy and she was billy to know their in the who all the mysterious seen at the flute the sun thought about
# ```
#
# Sampling is seeded, but the words follow the trained weights, so a different machine writes a
# different story.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_scope", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Scope.** This model demonstrates learned causal routing and next-token training. It is not a
# complete Transformer: no multiple heads, block FFN, LayerNorm, stacked blocks, or pretrained
# representation has been silently added.

# %% [markdown] nbgrader={"grade": false, "grade_id": "s_hidden", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Hidden checks
#
# The cells below carry the points of checks the autograder runs outside this notebook, on its own
# inputs and weights: no weight on padded keys for real queries, permutation of tokens with and without
# position rows (without them, permuting a window's tokens leaves the last position's logits unchanged
# when the last token stays in place; with them, it changes them), the parameter count at the seed's
# sizes, the $1/\sqrt{d_k}$ scaling
# (with $d_k \ne d_{model}$), and agreement with a correct model given the same weights. Your feedback
# report names any that fail.

# %% nbgrader={"grade": true, "grade_id": "hidden_padded_keys", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: no weight on padded keys for real queries (2 points)

# %% nbgrader={"grade": true, "grade_id": "hidden_equivariance", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: token permutation: invariant without position rows, broken with them (2 points)

# %% nbgrader={"grade": true, "grade_id": "hidden_parameter_count", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: 331,132 parameters at the seed's sizes (1 point)

# %% nbgrader={"grade": true, "grade_id": "hidden_scaling", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: scores divided by sqrt(d_k), with d_k != d_model (2 points)

# %% nbgrader={"grade": true, "grade_id": "hidden_reference_agreement", "locked": true, "schema_version": 3, "solution": false, "task": false}
# hidden check: agreement with a correct model given the same weights (2 points)

# %% nbgrader={"grade": false, "grade_id": "ask_the_check_service", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Optional: check this notebook against the course's hidden checks, a few times an hour. In JupyterLab it
# saves the notebook first; elsewhere it checks the last saved version and says when that was saved.
# It changes no grade. Without a check service set up for you, it says so in one sentence.
from attnkit_check import check
check("attention_lm")
