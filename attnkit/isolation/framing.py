"""The framing between the kit's processes: a little-endian u64 length, then that many bytes. Never a pickle.

- A submission's process to the judge: plain arrays (``encode_frame`` / ``decode_frames``).
- The notebook reader (``untrusted``) and the judge: one JSON message each way (``LENGTH`` before its bytes).
- The fork server's status pipe alone is a stream of decimal lines (pids and exit codes, zygote.py): it
  carries numbers only, read as they come.

A stream of frames, each ``u64 header length | JSON header | raw bytes``. The
header names each array with its dtype, shape and byte range; the reader
checks every one of those against the bytes it actually got. Nothing here ever
unpickles or imports: whatever a submission writes, reading it cannot run code.
A truncated stream (the process died mid-write) yields the frames that were
complete.
"""

import json
import struct

# numpy is imported where arrays are made: the notebook reader runs without site-packages and uses LENGTH only.
LENGTH = struct.Struct("<Q")

DTYPES = {"float32", "float64", "int64", "int32", "bool", "uint8"}
MAX_HEADER = 1 << 20          # bytes of one frame's JSON header
MAX_ARRAYS = 64               # arrays in one frame
MAX_NDIM = 8
MAX_NAME = 100                # characters of an array's name


class WireError(ValueError):
    pass


def encode_frame(meta: dict, arrays=None) -> bytes:
    import numpy as np
    arrays = arrays or {}
    table, chunks, offset = {}, [], 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype.name not in DTYPES:
            raise WireError(f"dtype {arr.dtype} cannot cross the wire")
        raw = arr.tobytes()
        table[name] = {"dtype": arr.dtype.name, "shape": list(arr.shape), "offset": offset, "nbytes": len(raw)}
        chunks.append(raw)
        offset += len(raw)
    header = json.dumps({"meta": meta, "arrays": table, "payload": offset}).encode()
    return LENGTH.pack(len(header)) + header + b"".join(chunks)


def _array(spec, payload: bytes):
    import numpy as np
    if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES:
        raise WireError("bad array spec")
    shape, off, n = spec.get("shape"), spec.get("offset"), spec.get("nbytes")
    if not (isinstance(shape, list) and len(shape) <= MAX_NDIM
            and all(type(s) is int and 0 <= s < 1 << 40 for s in shape)):
        raise WireError("bad shape")
    if not (isinstance(off, int) and isinstance(n, int) and 0 <= off and off + n <= len(payload)):
        raise WireError("array outside payload")
    dtype = np.dtype(spec["dtype"])
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != n:
        raise WireError("shape does not match byte count")
    return np.frombuffer(payload, dtype=dtype, count=n // dtype.itemsize, offset=off).reshape(shape).copy()


def decode_frames(blob: bytes, strict: bool = False) -> list[tuple[dict, dict]]:
    """The frames of ``blob``. A truncated last frame is dropped (its writer died mid-write) unless
    ``strict``, where anything but whole, well-formed frames raises WireError."""
    frames, pos = [], 0
    while pos + 8 <= len(blob):
        (hlen,) = LENGTH.unpack_from(blob, pos)
        if hlen > MAX_HEADER or pos + 8 + hlen > len(blob):
            if strict:
                raise WireError(f"header of {hlen} bytes at byte {pos}")
            break
        try:
            header = json.loads(blob[pos + 8:pos + 8 + hlen])
            plen = header["payload"]
            if type(plen) is not int or plen < 0 or pos + 8 + hlen + plen > len(blob):
                if strict:
                    raise WireError("payload outside the stream")
                break
            payload = blob[pos + 8 + hlen:pos + 8 + hlen + plen]
            table = header["arrays"]
            if not isinstance(table, dict) or len(table) > MAX_ARRAYS:
                raise WireError("bad array table")
            if any(not isinstance(k, str) or len(k) > MAX_NAME for k in table):
                raise WireError("bad array name")
            arrays = {k: _array(v, payload) for k, v in table.items()}
            meta = header["meta"]
            if not isinstance(meta, dict):
                raise WireError("meta is not an object")
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            error = WireError(f"malformed frame at byte {pos}: {str(e)[:100]}")
            error.frames = frames          # the whole frames before it, for a reader that keeps them
            raise error from e
        frames.append((meta, arrays))
        pos += 8 + hlen + plen
    if strict and pos != len(blob):
        raise WireError("trailing bytes")
    return frames
