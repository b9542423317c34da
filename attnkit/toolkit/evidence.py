"""Helpers for the evidence modules: facts measured from a submission, for the diagnosis catalogue."""

import torch

from attnkit.toolkit.require import require

SAME = 1e-5


def same(a, b) -> bool:
    """Equal within float32 noise, NaN where the other has NaN (a NaN row is part of a mistake's picture)."""
    return a is not None and b is not None and a.shape == b.shape and torch.allclose(
        a.double(), b.double(), atol=SAME, rtol=1e-4, equal_nan=True)


def arrays(results, name) -> dict:
    """The raw arrays of an experiment, or {} when it failed (evidence never raises)."""
    entry = results.results.get(name)
    return entry[1] if entry and not entry[0].get("error") else {}


def meta(results, name) -> dict:
    entry = results.results.get(name)
    return (entry[0].get("meta") or {}) if entry and not entry[0].get("error") else {}


def error(results, name) -> dict:
    entry = results.results.get(name)
    return (entry[0].get("error") or {}) if entry else {}


def as_json_matrix(t):
    """A 2-D tensor as nested lists, NaN and inf as None, so strict JSON can carry it."""
    return [[float(v) if torch.isfinite(v) else None for v in row] for row in t.double()]


FUSED_NAMES = frozenset({"scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                         "_native_multi_head_attention", "_scaled_dot_product_attention_math",
                         "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"})


def watched_ops(results) -> tuple[list, bool]:
    """What the child's operator watch (op_watch.py) saw over every watched experiment: the fused
    attention that ran, named as the student would call it where it can (the public function rather
    than the private kernels below it), and whether the watch was switched off meanwhile."""
    ran, tampered = set(), False
    for frame, _ in results.results.values():
        ops = frame.get("ops")
        if isinstance(ops, dict):
            ran.update(f.split("::")[-1] for f in ops.get("fused") or () if isinstance(f, str))
            tampered = tampered or ops.get("intact") is False
    public = sorted(n for n in ran if not n.startswith("_"))
    return public or sorted(ran), tampered


def require_own_attention(results, who: str, parts: str, actor: str) -> None:
    """The contract's rule that the student builds attention by hand, from what ran (watched_ops): a check fails
    when ``who`` ("your forward") ran torch's fused attention instead of building ``parts``, or when ``actor``
    did not leave torch's operators as it found them. The text scan of the source (fused_in_source) names a
    library attention in the diagnosis only: code that never runs in grading computes nothing graded (a helper
    comparing the student's code with torch's sdpa is fair), and what does run is seen by the watch."""
    ran, tampered = watched_ops(results)
    require(not ran, f"{who} ran torch's fused attention ({', '.join(ran)}): this assignment builds {parts} by hand")
    require(not tampered, "your code changed torch's registered attention kernels while it ran (the grader "
                          f"watches them): {actor} must leave torch's operators as it found them")


def fused_in_source(results) -> list:
    """Fused attention the kept source names: a witness of its own when the watch saw nothing."""
    return sorted(FUSED_NAMES & set(results.code.names))     # read inside the parse's limits


def with_beside(edits: list, beside: list) -> list:
    """A plug-in's ``reproduce``: the grammar's one edit (id, sentence), with the slips ``beside`` found on their own
    (shapes, a method's arrays against each other) that it does not already name, as one named set; several
    different edits, or none, are left as they are (numbers that do not single out a slip are not named)."""
    if len({i for i, _ in edits}) != 1:
        return edits
    ident, text = edits[0]
    extra = [(i, t) for i, t in beside if i not in ident.split("+")]
    return [("+".join([ident] + [i for i, _ in extra]), "; and ".join([text] + [t for _, t in extra]))] if extra \
        else edits
