"""Pipeline maps for the ``attention_lm`` notebook: the one-head causal attention route as boxes and arrows.

``show_pipeline("attention", "training", ("qkv", "scores"))`` draws the training route
with those two stages highlighted. Each mode keeps its boxes in fixed places, so
every highlighted view of a mode is the same map.

Shape letters: B = batch, w = context slots, d = embedding width, h = hidden width,
C = vocabulary size.
"""
from __future__ import annotations

import io
import warnings

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path as MplPath

__all__ = ["STAGES", "pipeline_layout", "draw_pipeline", "show_pipeline"]

# key -> (label, operation, shape); positions live in pipeline_layout
_LABELS = {
    "tokenize": ("tokenize", "text → words", ""),
    "ids": ("ids", "words → integers", ""),
    "windows": ("windows", "last w ids, left-padded", "[B, w]"),
    "embedding": ("embedding", "X = token + position", "[B, w, d]"),
    "qkv": ("Q, K, V", "XW_Q, XW_K, XW_V", "[B, w, d_k]"),
    "scores": ("scaled matches", "S = QKᵀ / √d_k", "[B, w, w]"),
    "mask": ("causal mask", "future → −∞", "[B, w, w]"),
    "weights": ("weights A", "row-wise softmax", "[B, w, w]"),
    "message": ("messages", "A·V", "[B, w, d_v]"),
    "projection": ("projection", "ΔX = (A·V) W_O", "[B, w, d]"),
    "residual": ("residual", "X′ = X + ΔX", "[B, w, d]"),
    "readout": ("readout", "last row x′_w", "[B, d]"),
    "hidden": ("hidden MLP", "ReLU(x′W₁ + b₁)", "[B, h]"),
    "logits": ("logits", "hW₂ + b₂", "[B, C]"),
    "loss": ("loss", "CE vs observed target", "scalar"),
    "backward": ("backward", "gradients", "same shapes as θ"),
    "optimizer": ("optimizer", "AdamW step", "θ ← θ − update"),
    "probabilities": ("probabilities", "softmax(logits / τ)", "[1, C]"),
    "choose": ("choose token", "sample or argmax", "1 id"),
    "append": ("append", "add id to history", ""),
    "stop": ("stop?", "<eos> or token limit", ""),
}

_SHARED = ("embedding", "qkv", "scores", "mask", "weights", "message",
           "projection", "residual", "readout", "hidden", "logits")
STAGES = {
    "training": ("tokenize", "ids", "windows") + _SHARED + ("loss", "backward", "optimizer"),
    "inference": ("windows",) + _SHARED + ("probabilities", "choose", "append", "stop"),
}

_STRONG, _NORMAL, _GREY = "#d95f02", "#3b6ea8", "#cfcfcf"
_HALF_W, _HALF_H = 0.39, 0.3          # box half-size in data units (columns are 1 apart)


def pipeline_layout(mode: str) -> tuple[dict, list]:
    """Box centres ``{key: (x, y)}`` and arrows ``[(src, dst, label, style)]`` for ``mode``.

    Three rows, read as a snake: inputs and Q/K/V left to right, attention right to
    left, readout and the mode's ending left to right.
    """
    if mode not in STAGES:
        raise ValueError(f"unknown mode {mode!r}; choose 'training' or 'inference'")
    stages = STAGES[mode]
    rows = (["tokenize", "ids", "windows", "embedding", "qkv", "scores"],       # y = 2, read left to right
            ["readout", "residual", "projection", "message", "weights", "mask"],  # y = 1, read right to left
            list(stages[stages.index("hidden"):]))                               # y = 0, read left to right
    pos = {key: (x, y) for y, row in zip((2, 1, 0), rows)
           for x, key in enumerate(row) if key in stages}
    arrows = [(a, b, "Q, K" if a == "qkv" else "", "-") for a, b in zip(stages, stages[1:])]
    arrows += [("qkv", "message", "V", "-"), ("embedding", "residual", "X (skip)", "--")]
    if mode == "inference":
        arrows.append(("stop", "windows", "not yet: next window", "--"))
    return pos, arrows


def _box_edge(pos, key, toward):
    """Point on the border of box ``key`` facing the point ``toward``."""
    (x, y), (tx, ty) = pos[key], toward
    if abs(ty - y) > 0.5:
        return x, y + (_HALF_H if ty > y else -_HALF_H)
    return x + (_HALF_W if tx > x else -_HALF_W), y


def _feedback_path(pos, src, dst):
    """Loop from the bottom of ``src`` round the left margin into the left side of ``dst``."""
    (sx, sy), (dx, dy) = pos[src], pos[dst]
    low, left = sy - _HALF_H - 0.2, -0.62
    return MplPath([(sx, sy - _HALF_H), (sx, low), (left, low), (left, dy), (dx - _HALF_W, dy)],
                   [MplPath.MOVETO] + [MplPath.LINETO] * 4)


def draw_pipeline(mode: str, highlight=(), ax=None):
    """Draw the ``mode`` map on ``ax`` (new figure if None); returns the Figure."""
    pos, arrows = pipeline_layout(mode)
    highlight = tuple(highlight)
    fig = ax.figure if ax is not None else plt.figure(figsize=(12, 5))
    ax = ax if ax is not None else fig.add_axes((0.005, 0.0, 0.99, 0.9))
    for key, (x, y) in pos.items():
        strong = key in highlight
        face = _STRONG if strong else (_GREY if highlight else _NORMAL)
        ink = "white" if (strong or not highlight) else "#6b6b6b"
        ax.add_patch(FancyBboxPatch((x - _HALF_W, y - _HALF_H), 2 * _HALF_W, 2 * _HALF_H,
                                    boxstyle="round,pad=0.02", facecolor=face, edgecolor="none", zorder=2))
        label, operation, shape = _LABELS[key]
        ax.text(x, y + 0.13, label, ha="center", va="center", fontsize=9.5, fontweight="bold", color=ink, zorder=3)
        ax.text(x, y - 0.04, operation, ha="center", va="center", fontsize=7.5, color=ink, zorder=3)
        ax.text(x, y - 0.19, shape, ha="center", va="center", fontsize=7, color=ink, zorder=3)
    for src, dst, label, style in arrows:
        lit = not highlight or (src in highlight and dst in highlight)
        ink = "#333333" if lit else "#b0b0b0"
        if (src, dst) == ("stop", "windows"):
            path = _feedback_path(pos, src, dst)
            arrow = FancyArrowPatch(path=path, arrowstyle="-|>", mutation_scale=12, color=ink,
                                    linestyle=style, zorder=1)
            where, align = (path.vertices[2][0] + 0.05, path.vertices[2][1] + 0.05), "left"
        else:
            start, end = _box_edge(pos, src, pos[dst]), _box_edge(pos, dst, pos[src])
            arrow = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=ink,
                                    linestyle=style, shrinkA=1, shrinkB=1, zorder=1)
            level = start[1] == end[1]
            where = ((start[0] + end[0]) / 2 + (0 if level else 0.04), (start[1] + end[1]) / 2 + 0.04)
            align = "center" if level else "left"
        ax.add_patch(arrow)
        if label:
            ax.text(*where, label, fontsize=7.5, color=ink, zorder=3, ha=align, va="bottom")
    note = ("training: parameters change; nothing is appended" if mode == "training"
            else "inference: parameters fixed; no target, no backward")
    ax.text(5 + _HALF_W, -_HALF_H - 0.3, note, ha="right", fontsize=7.5, color="#555555")
    ax.set_xlim(-0.75, 5.5)
    ax.set_ylim(-0.72, 2.38)
    ax.axis("off")
    title = f"One-head causal attention · {mode} route"
    fig.suptitle(title + (f" · highlighted: {', '.join(highlight)}" if highlight else ""),
                 fontsize=11, x=0.01, ha="left")
    return fig


def show_pipeline(model_kind: str = "attention", mode: str = "training", highlight=(), show: bool = True):
    """Draw the pipeline map for ``model_kind`` ("attention") in ``mode`` ("training" / "inference").

    ``highlight`` is a stage key or a sequence of keys (see ``STAGES[mode]``); unknown keys
    raise ValueError. With ``show=False`` the Figure is returned (for tests or saving).
    With ``show=True`` the figure is displayed (in a notebook as a 256-colour PNG, see ``_display``), closed,
    and None is returned, so a notebook cell ending in ``show_pipeline(...)`` renders it once, not twice.
    """
    if model_kind != "attention":
        raise ValueError(f"unknown model_kind {model_kind!r}; this notebook only maps 'attention'")
    if mode not in STAGES:
        raise ValueError(f"unknown mode {mode!r}; choose 'training' or 'inference'")
    highlight = (highlight,) if isinstance(highlight, str) else tuple(highlight)
    unknown = [key for key in highlight if key not in STAGES[mode]]
    if unknown:
        raise ValueError(f"unknown {mode} stage(s) {unknown}; valid stages: {', '.join(STAGES[mode])}")
    fig = draw_pipeline(mode, highlight)
    if not show:
        return fig
    _display(fig)
    plt.close(fig)
    return None


def _display(fig) -> None:
    """Show ``fig``: in a Jupyter kernel as a 256-colour PNG, else with ``plt.show()``.

    A map is a few flat colours and anti-aliased edges: a palette PNG draws the same picture in about a third of
    the bytes of matplotlib's RGBA PNG (25 KB for 70 KB at the inline backend's size), and the notebook shows eight
    maps, which every copy of it carries: the student's file and the feedback page made of it.
    """
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
        from PIL import Image as PILImage           # matplotlib's own dependency
    except ImportError:
        get_ipython = None
    if getattr(get_ipython and get_ipython(), "kernel", None) is None:       # no kernel: a script, a terminal
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*non-interactive.*")   # Agg: nothing to show
            plt.show()
        return
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi="figure", bbox_inches="tight", facecolor="white")  # as the inline backend draws
    picture = PILImage.open(rgba).convert("RGB").quantize(256)                        # it, opaque
    palette = io.BytesIO()
    picture.save(palette, format="PNG", optimize=True)
    display(Image(data=palette.getvalue(), format="png"))
