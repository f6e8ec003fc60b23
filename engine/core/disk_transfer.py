"""Moving kept turns between the pool and the disk cache's numpy arrays: the runner's
DiskLoad / DiskSave copies (engine thread only: it touches mx).

A save is gathered lazily before the step's forward (so it sees the pages as the
kept turn left them) and evaluated with the step; `to_numpy` copies it to the host
once that step is read back, and the disk cache's writer thread does the rest.
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.cache.cache_manager import DiskLoad, DiskSave
from engine.cache.disk_format import Tensor
from engine.core import pool_scatters
from engine.models.base import ModelCache

# mx dtype -> (safetensors code, the dtype the bytes are moved as)
CODES = {mx.float32: ("F32", mx.float32), mx.float16: ("F16", mx.float16),
         mx.bfloat16: ("BF16", mx.uint16)}


def token_rows(pages: list[int], num_tokens: int, page_size: int) -> mx.array:
    """Rows of the flat pools [num_pages * page_size, H, D] holding tokens 0..n-1."""
    pos = np.arange(num_tokens)
    return mx.array(np.asarray(pages, np.int64)[pos // page_size] * page_size
                    + pos % page_size, mx.int32)


def write_load(cache: ModelCache, load: DiskLoad) -> None:
    """Put a payload's K/V into its pages and its states into its slot (lazy)."""
    tensors = load.payload.tensors
    rows = _rows_or_slice(load.pages, load.payload.num_tokens, cache.page_size)
    pool_scatters.note()        # queued on a GPU only once no earlier reader holds a pool
    for i, pair in enumerate(cache.kv):
        for j, part in enumerate("kv"):
            pair[j][rows] = _device(tensors[f"kv.{i}.{part}"], pair[j].dtype)
    if load.slot is None:
        return
    slot = mx.array([load.slot])
    for i, layer in enumerate(cache.states):
        for j, arr in enumerate(layer):
            arr[slot] = _device(tensors[f"state.{i}.{j}"], arr.dtype)[None]
            layer[j] = arr


def _rows_or_slice(pages: list[int], num_tokens: int, page_size: int):
    """A slice when the pages are consecutive (fresh pages usually are: a slice update
    is cheaper than a scatter), else the rows."""
    first = pages[0] if pages else 0
    if pages != list(range(first, first + len(pages))):
        return token_rows(pages, num_tokens, page_size)
    return slice(first * page_size, first * page_size + num_tokens)


def gather_save(cache: ModelCache, save: DiskSave, slot: int | None) -> dict[str, mx.array]:
    """A kept turn's K/V [n, H, D] per layer and the states of `slot` (its own, or the
    running sequence's its snapshot copy reads) (lazy)."""
    rows = token_rows(save.pages, len(save.ids), cache.page_size)
    out = {}
    for i, pair in enumerate(cache.kv):
        for j, part in enumerate("kv"):
            out[f"kv.{i}.{part}"] = _host_view(pair[j][rows])
    if slot is not None:
        for i, layer in enumerate(cache.states):
            for j, arr in enumerate(layer):
                out[f"state.{i}.{j}"] = _host_view(arr[slot])
    return out


class HostCopies:
    """Gathered saves waiting to be copied to the host and handed to the disk cache, a
    few megabytes per step so that a long conversation's save never stalls a decode
    step (the copies are memcpys on the engine thread; the file work is the writer's)."""

    def __init__(self, disk, schema: dict[str, tuple]):
        self.disk, self.schema = disk, schema
        self._todo: list[tuple] = []     # (save, {name: evaluated mx array}, {name: Tensor})

    def __bool__(self) -> bool:
        return bool(self._todo)

    def add(self, saves: list[tuple]) -> None:
        """(DiskSave, gathered arrays) pairs whose step has been evaluated."""
        self._todo += [(save, dict(arrays), {}) for save, arrays in saves]

    def pump(self, max_bytes: float) -> None:
        """Copy up to max_bytes (at least one tensor); hand over every finished save."""
        done = 0
        while self._todo and done < max_bytes:
            save, arrays, host = self._todo[0]
            name, a = next(iter(arrays.items()))
            del arrays[name]
            try:
                host[name] = Tensor(self.schema[name][0], np.array(a, copy=True))
            except Exception:
                self._todo.pop(0)   # this save is lost (not retried every step); it raises
                raise
            done += a.nbytes
            if not arrays:
                self._todo.pop(0)
                self.disk.save(save.ids, host)


def schema(cache: ModelCache) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each saved tensor's (safetensors dtype code, shape without the token axis)."""
    out = {}
    for i, pair in enumerate(cache.kv):
        for j, part in enumerate("kv"):
            out[f"kv.{i}.{part}"] = (CODES[pair[j].dtype][0], tuple(pair[j].shape[1:]))
    for i, layer in enumerate(cache.states):
        for j, arr in enumerate(layer):
            out[f"state.{i}.{j}"] = (CODES[arr.dtype][0], tuple(arr.shape[1:]))
    return out


def _host_view(a: mx.array) -> mx.array:
    return a.view(CODES[a.dtype][1]) if a.dtype == mx.bfloat16 else a


def _device(t: Tensor, dtype: mx.Dtype) -> mx.array:
    a = mx.array(t.array)
    return a.view(mx.bfloat16) if t.code == "BF16" else a.astype(dtype)
