"""The figures a notebook shows are the figures a run prints, and no run prints float noise (issues 30 and 32).

A "Reference" cell quotes what the solution's run printed: each quoted line or code span with a digit in it must
be in the committed solution's output. A printed figure that float rounding moves (a row-sum error of 1e-7, the
difference of two equal computations) differs from machine to machine and would change a committed byte at every
release: it is printed as a bound instead.
"""
import contextlib
import io
import re

import nbformat
import pytest
import torch

from tests import KIT_ROOT
from tests.notebooks import solution_source
from tests.course.test_visible_twins import CELLS, DEMO, NOTEBOOK, SETUP
from attnkit.course import assignments

ASSIGNMENTS = assignments()


def _printed(nb) -> str:
    return "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def _quoted(markdown: str) -> list[str]:
    """The lines of its ```text blocks and its `code spans` that hold a digit."""
    blocks = re.findall(r"```text\n(.*?)```", markdown, flags=re.S)
    lines = [l.strip() for b in blocks for l in b.splitlines() if l.strip()]
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```text\n.*?```", "", markdown, flags=re.S))
    return [q for q in lines + spans if re.search(r"\d", q)]


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_every_figure_a_reference_cell_quotes_is_what_the_solution_prints(a):
    nb = nbformat.read(KIT_ROOT / "solutions" / a / f"{a}.ipynb", as_version=4)
    printed = _printed(nb)
    missing = [(c.get("id"), q) for c in nb.cells if c.cell_type == "markdown" and "Reference" in c.source
               for q in _quoted(c.source) if q not in printed]
    assert not missing, f"solutions/{a}: quoted figures no run printed: {missing}"


def test_a_quote_the_run_did_not_print_is_found():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="loss 4.01\n")]
    assert [q for q in _quoted("Reference: ```text\nloss 4.01\n```, `loss 4.02`") if q not in _printed(nb)] \
        == ["loss 4.02"]


# A float printed with more digits than float32 holds, or a value below 1e-5 in e-notation: rounding noise.
NOISE = re.compile(r"\b\d+\.\d{8,}\b|\b\d(?:\.\d+)?e-(?:0[6-9]|[1-9]\d)\b")


@pytest.mark.parametrize("a", ASSIGNMENTS)
def test_no_solution_prints_float_noise(a):
    printed = _printed(nbformat.read(KIT_ROOT / "solutions" / a / f"{a}.ipynb", as_version=4))
    assert not NOISE.findall(printed), f"solutions/{a} prints float noise: {NOISE.findall(printed)[:5]}"


def test_the_noise_pattern_sees_what_the_old_solutions_printed():
    for noise in ("max_row_sum_error': 1.1920928955078125e-07", "loss and gradients: 7.618092060089111",
                  "(diff 8.9e-08)", "(max |rowsum-1| = 1.2e-07)"):
        assert NOISE.search(noise), noise
    for figure in ("(diff 7.5e-01)", "min = 7.35e-02", "PPL=59.06", "< 1e-6", "76,800"):
        assert not NOISE.search(figure), figure


def _printed_by_the_head_cells(perturb: float, threads: int) -> tuple[str, list[float]]:
    """What causal_head's visible cells print when the input moves by ``perturb`` (relative) under ``threads``
    threads, and the raw rounding figures the old cells printed (row-sum error, token-permutation diff)."""
    ns: dict = {}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(SETUP, ns)
            exec(solution_source("causal_head", "head"), ns)
            exec(DEMO, ns)
            g = torch.Generator().manual_seed(1)
            ns["x"] = ns["x"] * (1 + perturb * torch.randn(ns["x"].shape, generator=g))
            ns["out"] = ns["head"](ns["x"])
            for gid in ("test_simplex_rows", "test_equivariance"):
                torch.manual_seed(5)        # the same permutation and embeddings on every run
                exec(next(src for g_, src in CELLS if g_ == gid), ns)
    finally:
        torch.set_num_threads(before)
    raw = [(ns["A"].sum(-1) - 1).abs().max().item(), (ns["a1"] - ns["b1"]).abs().max().item()]
    return out.getvalue(), raw


def test_printed_head_figures_do_not_move_with_float_noise(monkeypatch):
    """A relative change of 1e-6 in the input, and another thread count, move the rounding figures the cells
    once printed; what they print now stays the same."""
    monkeypatch.chdir(NOTEBOOK.parent)          # the setup cell finds corpus.py in the current folder
    runs = [_printed_by_the_head_cells(p, t) for p, t in ((0.0, 1), (1e-6, 2), (-1e-6, 1), (2e-6, 2))]
    raws = {tuple(f"{v:.1e}" for v in raw) for _, raw in runs}
    assert len(raws) > 1, f"no run moved the rounding figures: {raws}"       # the noise is there to hide
    assert len({text for text, _ in runs}) == 1, [text for text, _ in runs]
