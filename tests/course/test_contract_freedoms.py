"""What the notebooks tell students they may do, the judge accepts with full marks (issue 32, item 4).

causal_head's Head docstring grants: a bool, integer or float mask, no buffer when causal=False, a float64
self.A, -1e9 for the future, a persistent or non-persistent buffer, -inf or a number
so negative that exp gives 0 for the masked scores, extra buffers and modules without parameters in __init__. attention_lm's class docstring grants: extra buffers and parameter-free
modules, a bool or additive float mask, in a buffer (persistent or not) or built in forward_details;
-inf or a number so negative that exp gives 0 for the masked scores (-1e9, the dtype's most negative); padded query
rows that attend to themselves or to the padded keys before them; forward that returns forward_details' logits.
Each submission below uses some of them, on the solution's code, and must score every point.
"""
import pytest

from attnkit.engine.judge import grade
from tests.notebooks import solution_source, submission


def _edit(source: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


HEAD = solution_source("causal_head", "head")
HEAD_FREEDOMS = {
    "bool mask, non-persistent buffer": _edit(HEAD, (
        "self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max)))",
        "self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max, dtype=torch.bool)), persistent=False)")),
    "an extra buffer and a module without parameters": _edit(HEAD, (
        "        self.causal = causal\n",
        "        self.causal = causal\n"
        "        self.register_buffer('scale', torch.tensor(d_head ** -0.5))\n"
        "        self.dropout = nn.Dropout(0.0)\n"), (
        "scores = q @ k.transpose(-2, -1) / k.shape[-1]**0.5",
        "scores = q @ k.transpose(-2, -1) * self.scale"), (
        "A = F.softmax(scores, dim=-1)", "A = self.dropout(F.softmax(scores, dim=-1))")),
    "an integer mask": _edit(HEAD, (
        "self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max)))",
        "self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max, dtype=torch.long)))")),
    "-1e9 for the future, a float64 self.A": _edit(HEAD, (
        "scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))",
        "scores = scores.masked_fill(self.tril[:T, :T] == 0, -1e9)"), (
        "self.A = A.detach()", "self.A = A.detach().double()")),
    "no buffer in a head built with causal=False": _edit(HEAD, (
        "self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max)))",
        "if causal:\n            self.register_buffer('tril', torch.tril(torch.ones(T_max, T_max)))")),
    "the future filled with the dtype's most negative number, not -inf": _edit(HEAD, (
        "scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))",
        "scores = scores.masked_fill(self.tril[:T, :T] == 0, torch.finfo(scores.dtype).min)")),
}

LM = solution_source("attention_lm", "lm")
_REUSE = ("        _, T = ids.shape\n        positions = torch.arange(T, device=ids.device)                                        # (T,)\n",
          "        return self.forward_details(ids)[\"logits\"]\n        _, T = ids.shape\n        positions = torch.arange(T, device=ids.device)                                        # (T,)\n")
LM_FREEDOMS = {
    "forward reuses forward_details, a bool buffer non-persistent, an extra module": _edit(LM, (
        "        self.vocab_head = nn.Linear(hidden, vocab_size)\n",
        "        self.vocab_head = nn.Linear(hidden, vocab_size)\n"
        "        self.act = nn.ReLU()\n"
        "        self.register_buffer('future', torch.triu(torch.ones(context_len, context_len, dtype=torch.bool), 1),"
        " persistent=False)\n"), (
        "        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=ids.device), diagonal=1)  # (T, T)\n",
        "        future = self.future[:T, :T]\n"), (
        "        hidden = F.relu(self.hidden_layer(contextual))", "        hidden = self.act(self.hidden_layer(contextual))"),
        _REUSE),
    "masked scores of -1e9 in forward_details and of the dtype's most negative number in forward": _edit(LM, (
        'masked_scores = scores.masked_fill(attention_mask, float("-inf"))',
        "masked_scores = scores.masked_fill(attention_mask, -1e9)"), (
        'scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], float("-inf"))',
        "scores_last.masked_fill(ids.eq(self.pad_id)[:, None, :], torch.finfo(scores_last.dtype).min)")),
    "padded queries attend to themselves only, an additive float mask": _edit(LM, (
        "        attention_mask = future[None, :, :] | padded_key_for_real_query                       # (B, T, T)\n"
        "        masked_scores = scores.masked_fill(attention_mask, float(\"-inf\"))                     # (B, T, T)\n",
        "        eye = torch.eye(T, dtype=torch.bool, device=ids.device)\n"
        "        padded_query_elsewhere = (~real[:, :, None]) & ~eye[None]\n"
        "        attention_mask = future[None, :, :] | padded_key_for_real_query | padded_query_elsewhere\n"
        "        additive = torch.zeros(attention_mask.shape, device=ids.device).masked_fill(attention_mask, float('-inf'))\n"
        "        masked_scores = scores + additive\n")),
}
# an nn.Dropout that acts only in training, where a student puts one (blind set 13's c07 lost the tiny-batch
# overfit: the judge trained through it; the docstring allows it): on X, on the weights, on the hidden layer
_DROP = ("        self.vocab_head = nn.Linear(hidden, vocab_size)\n",
         "        self.vocab_head = nn.Linear(hidden, vocab_size)\n        self.drop = nn.Dropout(0.1)\n")
for where, edits in {
        "the embeddings X": [(
            "X = self.token_embedding(ids) + self.position_embedding(positions)[None, :, :]",
            "X = self.drop(self.token_embedding(ids) + self.position_embedding(positions)[None, :, :])")],
        "the attention weights": [
            ("weights = F.softmax(masked_scores, dim=-1)", "weights = self.drop(F.softmax(masked_scores, dim=-1))"),
            ("message_last = F.softmax(scores_last, dim=-1) @ V",
             "message_last = self.drop(F.softmax(scores_last, dim=-1)) @ V")],
        "the hidden layer": [
            ("hidden = F.relu(self.hidden_layer(contextual))", "hidden = self.drop(F.relu(self.hidden_layer(contextual)))"),
            ("return self.vocab_head(F.relu(self.hidden_layer(contextual_last)))",
             "return self.vocab_head(self.drop(F.relu(self.hidden_layer(contextual_last))))")]}.items():
    src = _edit(LM, _DROP)
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    LM_FREEDOMS[f"an nn.Dropout(0.1) in training, on {where}"] = src


def _full_marks(nb, assignment):
    result = grade(nb, assignment)
    failed = [(c["id"], c.get("message", "")[:200]) for c in result["checks"] if not c["passed"]]
    assert not failed and result["score"] == result["max_score"], failed


@pytest.mark.parametrize("name", sorted(HEAD_FREEDOMS))
def test_causal_head_grants_full_marks(name):
    _full_marks(submission("causal_head", {"head": HEAD_FREEDOMS[name]}), "causal_head")


@pytest.mark.parametrize("name", sorted(LM_FREEDOMS))
def test_attention_lm_grants_full_marks(name):
    _full_marks(submission("attention_lm", {"lm": LM_FREEDOMS[name]}), "attention_lm")


def test_the_judge_is_not_blind_here():
    """The same edits with one slip (a parameter added, the scale dropped) lose points: the tests above can fail."""
    extra = _edit(HEAD_FREEDOMS["an extra buffer and a module without parameters"],
                  ("self.dropout = nn.Dropout(0.0)", "self.dropout = nn.Linear(d_head, d_head)"),
                  ("A = self.dropout(F.softmax(scores, dim=-1))", "A = F.softmax(scores, dim=-1)"))
    result = grade(submission("causal_head", {"head": extra}), "causal_head")
    assert result["score"] < result["max_score"]
