"""Helpers for the evidence modules: facts measured from a submission, for the diagnosis catalogue."""

import torch

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
