"""Pieces every reference implementation shares (each assignment's own is autograder/<A>/reference.py)."""
import torch


def causal_mask(T: int) -> torch.Tensor:
    return torch.tril(torch.ones(T, T, dtype=torch.bool))                    # (T, T)
