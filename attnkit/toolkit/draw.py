"""Random generators that use a seed's full width: what a plan draws its hidden inputs from.

``torch.Generator().manual_seed(s)`` keeps only the low 32 bits of ``s`` (torch's Mersenne Twister is seeded
with a 32-bit word), so a plan seeded that way from a 256-bit key has 2^32 possible draws: one leaked exact value
and a search of 2^32 seeds would give every hidden input. Here the generator's whole state (624 words of 32 bits)
is filled from SHAKE-256 of the seed, so two seeds that differ in any bit give unrelated draws.

The numpy and Python generators take the seed's full width natively (``SeedSequence`` and ``random.Random``
hash an integer of any size); they are here so that a plan needing one does not reach for a 32-bit habit.
"""
from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

_WORDS = 624                  # mt19937's state, in 32-bit words
_STATE_BYTES = 5056           # torch's CPU generator state: (u64 seed, i32 left, i32 seeded, u64 next, u64[624] ...)
_WORDS_AT = 24


def seed_bytes(seed: int) -> bytes:
    """The seed as bytes, its whole width (a negative seed is refused: seeds are HMAC digests or small ints)."""
    if seed < 0:
        raise ValueError("a seed is a non-negative integer")
    return seed.to_bytes(max(8, (seed.bit_length() + 7) // 8), "little")


def generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` whose whole Mersenne Twister state comes from ``seed`` (any width)."""
    g = torch.Generator()
    state = g.get_state().numpy().copy()                            # (5056,) uint8: a valid state to fill in
    if state.size != _STATE_BYTES:                                  # torch changed its layout: refuse loudly
        raise RuntimeError(f"torch's generator state is {state.size} bytes, expected {_STATE_BYTES}")
    words = np.frombuffer(hashlib.shake_256(b"attnkit-plan\0" + seed_bytes(seed)).digest(4 * _WORDS), "<u4")
    head = np.array([int.from_bytes(seed_bytes(seed)[:8], "little") & (2**63 - 1), 1 | (1 << 32), 0], "<u8")
    state[:_WORDS_AT] = np.frombuffer(head.tobytes(), np.uint8)     # initial seed (for show), left=1, seeded=1, next=0
    state[_WORDS_AT:_WORDS_AT + 8 * _WORDS] = np.frombuffer(words.astype("<u8").tobytes(), np.uint8)
    g.set_state(torch.from_numpy(state))                            # left=1: the first draw twists the new state
    return g


def numpy_generator(seed: int) -> np.random.Generator:
    """numpy's PCG64, seeded from the whole of ``seed`` (SeedSequence keeps every bit)."""
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(seed_bytes(seed), "little")))


def python_random(seed: int) -> random.Random:
    """Python's generator, seeded from the whole of ``seed`` (an int seed of any size is used whole)."""
    return random.Random(seed)
