"""Check a .safetensors file's header before MLX reads it.

The format: 8 bytes (little-endian u64) giving the header's length N, N bytes of
JSON (an object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]},
offsets relative to the data after the header, plus an optional "__metadata__" of
strings), then the data. A flipped bit in the length, a header that is not JSON, or
offsets past the end of the file or overlapping another tensor's bytes must become a
ModelLoadError naming the file and the tensor, never a read past the file or a
tensor silently made of another's bytes. Only the header is read.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from engine.errors import ModelLoadError

MAX_HEADER = 100 << 20          # the reference implementation's limit (100 MB)
# dtype -> bytes per element (safetensors' own list; MLX reads a subset, and says so)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
               "F64": 8, "C64": 8}


def check_safetensors(path: Path) -> None:
    """Raise ModelLoadError if the header is not one MLX can trust; return quietly if it is."""
    try:
        _check(path)
    except _Corrupt as e:
        raise ModelLoadError(f"{path.name} is damaged: {e}. Re-download it.") from None
    except OSError as e:
        raise ModelLoadError(f"Cannot read {path} ({e.strerror or e}).") from None


class _Corrupt(Exception):
    """What is wrong, without the file name (check_safetensors adds it)."""


def _check(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _Corrupt(f"it is {size} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or n > size - 8:
            raise _Corrupt(f"its header length says {n} bytes, but the file is {size} bytes"
                           if n <= MAX_HEADER else
                           f"its header length says {n} bytes (more than {MAX_HEADER})")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _Corrupt(f"its header is not JSON ({str(e)[:120]})") from None
    if not isinstance(header, dict):
        raise _Corrupt(f"its header is a JSON {type(header).__name__}, not an object")
    _check_tensors(header, size - 8 - n)


def _check_tensors(header: dict, data_size: int) -> None:
    meta = header.get("__metadata__")
    if meta is not None and not isinstance(meta, dict):
        raise _Corrupt("its '__metadata__' is not an object")
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = _tensor_span(name, info)
        if end > data_size:
            raise _Corrupt(f"tensor '{name}' ends at byte {end} of a data section of "
                           f"{data_size} bytes (the file is truncated, or the offsets wrong)")
        spans.append((begin, end, name))
    spans.sort()
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise _Corrupt(f"tensors '{a}' and '{b}' overlap (bytes {begin_b}..{end_a})")


def _tensor_span(name: str, info: object) -> tuple[int, int]:
    if not isinstance(info, dict):
        raise _Corrupt(f"tensor '{name}' is described by a {type(info).__name__}, not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise _Corrupt(f"tensor '{name}' has an unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
        raise _Corrupt(f"tensor '{name}' has an invalid shape {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_size(o) for o in offsets) or offsets[0] > offsets[1]):
        raise _Corrupt(f"tensor '{name}' has invalid data_offsets {offsets!r}")
    begin, end = offsets
    want = math.prod(shape) * DTYPE_BYTES[dtype]
    if end - begin != want:
        raise _Corrupt(f"tensor '{name}' of shape {tuple(shape)} {dtype} needs {want} bytes, "
                       f"its data_offsets span {end - begin}")
    return begin, end


def _is_size(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62
