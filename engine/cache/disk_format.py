"""One disk cache entry as a safetensors file, written and read with numpy only (no mlx:
the writer thread may not touch mx).

Layout (docs/ENGINE.md, "Disk cache"): tensors ``ids`` (int32 [n], first in the data so
a scan reads it without the rest), ``kv.{layer}.k`` / ``kv.{layer}.v`` ([n, H, D], the
pool's dtype; bfloat16 is stored as its raw 16 bits, code BF16) and, for recurrent
models, ``state.{layer}.{i}`` (one slot's state arrays). ``__metadata__`` holds the
format version, the model key and a CRC-32 of the data section, so a
truncated, corrupted or foreign file is refused, never read into the cache.
"""
from __future__ import annotations

import io
import json
import math
import os
import secrets
import stat
import struct
import zlib
from dataclasses import dataclass

import numpy as np

FORMAT_VERSION = 1
MAX_HEADER = 64 << 20
TMP_SUFFIX = ".tmp"            # a write in progress (or one a crash left behind)

# safetensors dtype code -> numpy dtype of the stored bytes (BF16 kept as raw uint16)
NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I32": np.int32}


class BadEntry(Exception):
    """The file is not a usable entry (truncated, corrupt, another model or format)."""


@dataclass(frozen=True)
class Tensor:
    code: str                  # safetensors dtype code
    array: np.ndarray          # stored bytes' dtype (BF16 as uint16)


def checksum(chunks) -> str:
    """CRC-32 of the chunks: it catches truncation and flipped bits (the files are a
    cache, not a security boundary) at ~1 GB/s, 5x a cryptographic hash."""
    crc = 0
    for c in chunks:
        crc = zlib.crc32(c, crc)
    return f"{crc:08x}"


def write_entry(path: str, tensors: dict[str, Tensor], model_key: str) -> int:
    """Write atomically (a temporary file renamed over `path`); returns the bytes written.
    OSError (disk full, read-only folder) propagates, leaving no partial file. The
    temporary name is unique (process, random), so two writers of one entry, in two
    processes sharing the folder or two engines in one, never write into one file; the
    rename makes a reader see the old file or the new one whole, never a torn one."""
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = np.ascontiguousarray(t.array).tobytes()
        header[name] = {"dtype": t.code, "shape": list(t.array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": str(FORMAT_VERSION), "model": model_key,
                              "checksum": checksum(blobs)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = f"{path}.{os.getpid()}-{secrets.token_hex(4)}{TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for b in blobs:
                f.write(b)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    return 8 + len(raw) + offset


def read_header(f, size: int) -> tuple[dict, int]:
    """(header, start of the data section) of an open file of `size` bytes."""
    head = f.read(8)
    if len(head) != 8:
        raise BadEntry("shorter than a header")
    (n,) = struct.unpack("<Q", head)
    if n > min(MAX_HEADER, size - 8):
        raise BadEntry("header length past the end of the file")
    try:
        header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BadEntry(f"header is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise BadEntry("header has no metadata")
    return header, 8 + n


def check_header(header: dict, data_size: int, model_key: str) -> None:
    meta = header["__metadata__"]
    if meta.get("format") != str(FORMAT_VERSION):
        raise BadEntry(f"format {meta.get('format')!r}, this engine writes {FORMAT_VERSION}")
    if meta.get("model") != model_key:
        raise BadEntry("written for another model")
    end = 0
    for name, info in _tensors(header):
        try:
            start, stop = info["data_offsets"]
            dtype = np.dtype(NUMPY_DTYPES[info["dtype"]])
            shape = info["shape"]
            if not all(_is_size(v) for v in (start, stop, *shape)):
                raise ValueError("not whole numbers")
            count = math.prod(shape)
        except (KeyError, TypeError, ValueError):
            raise BadEntry(f"tensor {name!r} is malformed") from None
        if start != end or stop - start != count * dtype.itemsize:
            raise BadEntry(f"tensor {name!r} does not tile the data section")
        end = stop
    if end != data_size:
        raise BadEntry(f"data section is {data_size} bytes, the header says {end}")


def open_entry(path: str):
    """The entry file opened for reading, never through a symbolic link (O_NOFOLLOW: a
    link planted in the folder could point anywhere) and only if it is a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise BadEntry(f"cannot open it ({e.strerror or e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadEntry("not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_ids(path: str, model_key: str) -> tuple[np.ndarray, int]:
    """An entry's token ids and file size, reading the header and the ids only."""
    try:
        with open_entry(path) as f:
            size = os.fstat(f.fileno()).st_size
            header, start = read_header(f, size)
            check_header(header, size - start, model_key)
            info = header.get("ids")
            if info is None or info["dtype"] != "I32" or info["data_offsets"][0] != 0:
                raise BadEntry("no ids tensor first")
            f.seek(start)
            ids = np.frombuffer(f.read(info["data_offsets"][1]), np.int32)
    except (OSError, ValueError) as e:      # ValueError: a short read of the ids
        raise BadEntry(f"cannot read: {e}") from None
    return ids, size


def read_entry(path: str, model_key: str) -> dict[str, Tensor]:
    """Every tensor of a checked entry (the whole file is read and its checksum verified)."""
    try:
        with open_entry(path) as f:
            blob = f.read()
    except OSError as e:
        raise BadEntry(f"cannot read: {e}") from None
    header, start = read_header(io.BytesIO(blob), len(blob))
    check_header(header, len(blob) - start, model_key)
    data = memoryview(blob)[start:]
    if checksum([data]) != header["__metadata__"].get("checksum"):
        raise BadEntry("checksum mismatch (the file is corrupt)")
    out = {}
    for name, info in _tensors(header):
        start_, stop = info["data_offsets"]
        arr = np.frombuffer(data[start_:stop], NUMPY_DTYPES[info["dtype"]])
        out[name] = Tensor(info["dtype"], arr.reshape(info["shape"]))
    return out


def _is_size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62


def _tensors(header: dict):
    return ((k, v) for k, v in header.items() if k != "__metadata__")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
