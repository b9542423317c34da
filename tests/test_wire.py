"""The data-only channel: round trips, truncation, and a hostile header."""
import json
import struct

import numpy as np
import pytest

from attnkit.isolation import framing


def test_round_trip_keeps_bits():
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    frames = framing.decode_frames(framing.encode_frame({"kind": "x"}, {"a": a, "b": np.arange(5)}))
    (meta, arrays), = frames
    assert meta == {"kind": "x"} and arrays["a"].tobytes() == a.tobytes() and arrays["b"].tolist() == list(range(5))


def test_truncated_stream_keeps_complete_frames():
    blob = framing.encode_frame({"n": 1}) + framing.encode_frame({"n": 2}, {"a": np.ones(100)})
    assert [m["n"] for m, _ in framing.decode_frames(blob[:-10])] == [1]


def _frame(header: dict, payload: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + payload


@pytest.mark.parametrize("spec", [
    {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 64},          # outside the payload
    {"dtype": "float32", "shape": [3], "offset": 0, "nbytes": 16},          # shape/bytes mismatch
    {"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8},            # not a plain dtype
])
def test_hostile_array_specs_are_refused(spec):
    with pytest.raises(framing.WireError):
        framing.decode_frames(_frame({"meta": {}, "arrays": {"a": spec}, "payload": 16}, b"\0" * 16))


def test_objects_cannot_be_sent():
    with pytest.raises(framing.WireError):
        framing.encode_frame({}, {"a": np.array([object()])})
