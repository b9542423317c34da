"""Figures do not depend on the fonts a machine has: with Liberation Sans installed (Debian's chromium pulls in
fonts-liberation; seaborn's style names it before DejaVu Sans, and it lacks glyphs the notebooks draw, such as
U+1D40 and U+2081), the notebooks' figures are the committed solution's, byte for byte, with no glyph warning, and
the kit's own figures are the same whatever style the caller set.

matplotlib lists a machine's fonts once and caches the list (in MPLCONFIGDIR): each run here gets a fresh one,
so the fonts installed now are the ones seen.
"""
from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests import KIT_ROOT
from attnkit.release import kernel_env

A = "attention_lm"
LIBERATION = "LiberationSans-Regular.ttf"


def _fresh_matplotlib(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "mplconfig"
    config.mkdir(exist_ok=True)
    return {"MPLCONFIGDIR": str(config)}


@pytest.fixture
def liberation(tmp_path):
    """Liberation Sans must be installed, and matplotlib must see it: else this test would prove nothing."""
    code = "from matplotlib import font_manager as fm; print('\\n'.join(f.fname for f in fm.fontManager.ttflist))"
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **_fresh_matplotlib(tmp_path)),
                       capture_output=True, text=True, timeout=300)
    if LIBERATION not in p.stdout:
        if os.environ.get("CI"):
            pytest.fail("fonts-liberation is required in CI (make test installs it with chromium)")
        pytest.skip("fonts-liberation is not installed (apt-get install fonts-liberation; make browser installs it)")


def _png(output) -> bytes | None:
    data = output.get("data", {}).get("image/png")
    return base64.b64decode(data) if data else None


def test_the_notebook_draws_its_figures_in_dejavu_whatever_fonts_are_installed(liberation, tmp_path):
    """The setup cell and every pipeline map of the LM notebook (their labels hold QKᵀ and W₁), run as the
    release runs them: no glyph warning, and each image the committed solution's."""
    src = KIT_ROOT / "source" / A
    folder = tmp_path / A
    folder.mkdir()
    for name in ("wordlm.py", "pipeline_maps.py"):
        shutil.copyfile(src / name, folder / name)
    nb = nbformat.read(src / f"{A}.ipynb", as_version=4)
    keep = [c for c in nb.cells if c.cell_type == "code" and (c.get("id") == "setup" or "show_pipeline(" in c.source)]
    assert len(keep) >= 5, len(keep)
    nb.cells = keep
    from nbclient import NotebookClient
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute(
        env=dict(kernel_env(), **_fresh_matplotlib(tmp_path)))
    committed = {c.get("id"): c for c in nbformat.read(KIT_ROOT / "solutions" / A / f"{A}.ipynb", as_version=4).cells}
    texts = [o.get("text", "") for c in nb.cells for o in c.outputs]
    assert not any("Glyph" in t or "missing from font" in t for t in texts), [t for t in texts if "Glyph" in t][:3]
    drawn = 0
    for c in nb.cells:
        ours = [p for p in map(_png, c.outputs) if p]
        theirs = [p for p in map(_png, committed[c.get("id")].outputs) if p]
        assert ours == theirs, f"cell {c.get('id')}: the figure differs from solutions/{A}/{A}.ipynb's"
        drawn += len(ours)
    assert drawn >= 5, drawn


KIT_FIGURE = """
import base64, sys, warnings
warnings.simplefilter("error")                       # a missing glyph is a warning: fail on it
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
if sys.argv[1] == "seaborn":
    plt.style.use("seaborn-v0_8-whitegrid")          # a caller whose style prefers the machine's fonts
from attnkit.nbgrader_ext.feedback_report import heatmap_png
print(heatmap_png(np.tril(np.full((4, 4), 0.25)), "query i \\u2081 attends to key j, Kᵀ"))
"""


def test_the_kits_figures_are_the_same_whatever_style_the_caller_set(liberation, tmp_path):
    env = dict(os.environ, **_fresh_matplotlib(tmp_path))
    runs = {}
    for style in ("default", "seaborn"):
        p = subprocess.run([sys.executable, "-c", KIT_FIGURE, style], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        runs[style] = p.stdout
    assert runs["seaborn"] == runs["default"]
