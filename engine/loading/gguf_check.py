"""Check a GGUF file's structure before MLX reads it.

MLX's GGUF reader trusts the file's counts and lengths: one flipped bit in the
tensor count (byte 13) or the key/value count (byte 20) makes it read past the
file and the process dies with SIGSEGV. This is our own bounds-checked walk of
the header, every key/value (arrays and strings included) and the tensor table,
against the file size; tensor data is never read, so a 100 MB file is checked in
the time it takes to walk its tokenizer's ~100k strings.

Why not the `gguf` package llama.cpp publishes (0.19.0, measured on the built-in
98 MB model): it is pure Python too, so it does not crash, but it takes 3.2 s
on the intact file (this check: 0.15 s), it accepts a misaligned tensor offset
(which MLX then loads as garbage), and most faults surface as a bare
"IndexError: index 0 is out of bounds", which names nothing a user can act on.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path

from engine.errors import ModelLoadError

VERSIONS = (2, 3)                 # v1 used 32-bit counts; llama.cpp no longer writes it
MAX_DIMS = 4                      # GGML_MAX_DIMS
MAX_NAME = 64                     # GGML_MAX_NAME, trailing NUL included
MAX_ARRAY_DEPTH = 2               # arrays of arrays exist (rare); deeper is corruption
DEFAULT_ALIGNMENT = 32
# GGUF value types: id -> struct format of one scalar (8 string, 9 array handled apart).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
# ggml tensor types: id -> (elements per block, bytes per block), from ggml.c's type_traits.
GGML_TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1),
    25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17),
}


class _Corrupt(Exception):
    """What is wrong, without the file name (check_gguf adds it)."""


class _Reader:
    """Bounds-checked little-endian reads over a memory map."""

    def __init__(self, data: mmap.mmap):
        self.data, self.pos, self.size = data, 0, len(data)

    def remaining(self) -> int:
        return self.size - self.pos

    def take(self, fmt: str, what: str):
        n = struct.calcsize("<" + fmt)
        if n > self.remaining():
            raise _Corrupt(f"it ends inside {what} (at byte {self.pos} of {self.size})")
        value = struct.unpack_from("<" + fmt, self.data, self.pos)[0]
        self.pos += n
        return value

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining():
            raise _Corrupt(f"{what} is {n} bytes long but only {self.remaining()} bytes "
                           f"are left (at byte {self.pos})")
        self.pos += n

    def string(self, what: str, limit: int | None = None) -> bytes:
        n = self.take("Q", f"the length of {what}")
        if limit is not None and n > limit:
            raise _Corrupt(f"{what} is {n} bytes long (at most {limit} allowed)")
        start = self.pos
        self.skip(n, what)
        return bytes(self.data[start:self.pos])

    def skip_string(self, what: str) -> None:
        self.skip(self.take("Q", f"the length of {what}"), what)


def _value(r: _Reader, vtype: int, what: str, depth: int = 0):
    """Read one value; arrays are walked, not kept (only short scalar values are returned)."""
    if vtype in _SCALARS:
        return r.take(_SCALARS[vtype], what)
    if vtype == _STRING:
        r.skip_string(what)
        return None
    if vtype != _ARRAY or depth >= MAX_ARRAY_DEPTH:
        raise _Corrupt(f"{what} has unknown value type {vtype}")
    etype = r.take("I", f"the element type of {what}")
    count = r.take("Q", f"the length of {what}")
    if etype in _SCALARS:
        r.skip(count * struct.calcsize("<" + _SCALARS[etype]), what)
        return None
    if count * 8 > r.remaining():      # a string or array element is at least 8 bytes
        raise _Corrupt(f"{what} claims {count} elements, more than the file can hold")
    for i in range(count):
        _value(r, etype, f"element {i} of {what}", depth + 1)
    return None


def _key_values(r: _Reader, count: int) -> int:
    """Walk every key/value; return general.alignment (or the default)."""
    alignment = DEFAULT_ALIGNMENT
    for i in range(count):
        key = _text(r.string(f"key {i}", limit=1 << 16), f"key {i}")
        vtype = r.take("I", f"the type of '{key}'")
        value = _value(r, vtype, f"the value of '{key}'")
        if key == "general.alignment":
            if vtype != 4 or not value or value & (value - 1):
                raise _Corrupt(f"general.alignment is {value!r} (type {vtype}); "
                               "it must be a power of two stored as uint32")
            alignment = value
    return alignment


def _tensor_info(r: _Reader, i: int) -> tuple[str, int, int]:
    """(name, byte size, offset) of tensor i, with its dims and type checked."""
    name = _text(r.string(f"the name of tensor {i}", limit=MAX_NAME - 1), f"tensor {i}'s name")
    n_dims = r.take("I", f"the dimension count of '{name}'")
    if not 1 <= n_dims <= MAX_DIMS:
        raise _Corrupt(f"tensor '{name}' has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
    dims = [r.take("Q", f"the shape of '{name}'") for _ in range(n_dims)]
    ttype = r.take("I", f"the type of '{name}'")
    offset = r.take("Q", f"the offset of '{name}'")
    if ttype not in GGML_TYPES:
        raise _Corrupt(f"tensor '{name}' has unknown type id {ttype}")
    block, block_bytes = GGML_TYPES[ttype]
    elements = 1
    for d in dims:
        if not 1 <= d < 1 << 40:
            raise _Corrupt(f"tensor '{name}' has shape {dims}: a dimension is out of range")
        elements *= d
    if dims[0] % block:
        raise _Corrupt(f"tensor '{name}' has a first dimension of {dims[0]}, not a multiple "
                       f"of its type's block of {block}")
    if elements >= 1 << 56:
        raise _Corrupt(f"tensor '{name}' has shape {dims}: too many elements")
    return name, elements // block * block_bytes, offset


def _tensors(r: _Reader, count: int, alignment: int) -> None:
    infos, names = [], set()
    for i in range(count):
        info = _tensor_info(r, i)
        if info[0] in names:
            raise _Corrupt(f"tensor '{info[0]}' appears twice")
        names.add(info[0])
        infos.append(info)
    data_start = -(-r.pos // alignment) * alignment
    data_size = r.size - data_start
    for name, nbytes, offset in infos:
        if offset % alignment:
            raise _Corrupt(f"tensor '{name}' starts at offset {offset}, not a multiple of "
                           f"the alignment {alignment}")
        if offset + nbytes > data_size:
            raise _Corrupt(f"tensor '{name}' ({nbytes} bytes at offset {offset}) ends past the "
                           f"end of the file (the data section holds {max(data_size, 0)} bytes)")


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Corrupt(f"{what} is not valid UTF-8") from None


def _check(r: _Reader) -> None:
    if r.take("4s", "the magic number") != b"GGUF":
        raise _Corrupt("it does not start with the GGUF magic number")
    version = r.take("I", "the version")
    if version not in VERSIONS:
        raise _Corrupt(f"it is GGUF version {version} (Tandem reads versions 2 and 3)")
    n_tensors = r.take("Q", "the tensor count")
    n_kv = r.take("Q", "the key/value count")
    # Smallest entries: a key/value is 8+1+4+1 bytes, a tensor entry 8+1+4+8+4+8.
    if n_kv * 14 > r.remaining() or n_tensors * 33 > r.remaining():
        raise _Corrupt(f"its header claims {n_tensors} tensors and {n_kv} key/values, more "
                       f"than {r.size} bytes can hold (the header is corrupt)")
    _tensors(r, n_tensors, _key_values(r, n_kv))


def check_gguf(path: str | Path) -> None:
    """Raise ModelLoadError naming the file and the fault if `path` is not a sound GGUF file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.seek(0, 2) == 0:
                raise _Corrupt("it is empty")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _check(_Reader(data))
    except OSError as e:
        raise ModelLoadError(f"Cannot read {path.name} ({e}).") from e
    except _Corrupt as e:
        raise ModelLoadError(f"{path.name} is not a valid GGUF file: {e}. The file is damaged "
                             "or truncated; download it again.") from None
