"""The kit's own figures (the feedback report's heatmaps, the class report's charts) look the same on every
machine: matplotlib's default style, whatever a matplotlibrc or the caller set, in DejaVu Sans, the font that
ships inside matplotlib. A style that names machine fonts first (seaborn's names Arial, Liberation Sans) would
draw in whichever is installed, and warn about every glyph it lacks."""
from __future__ import annotations

import contextlib

FONT = "DejaVu Sans"


@contextlib.contextmanager
def kit_style():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.style
    with matplotlib.style.context(["default", {"font.family": FONT}]):
        yield
