"""Arrays a step makes from host values: few, and the same ones where the values repeat.

On MLX 0.32's CUDA backend every array made from host values (`mx.array(numpy)`) is a
host allocation, and the allocator's buffer cache may hand it a buffer a kernel freed, in
device memory; it then moves that buffer to unified memory with a blocking `cudaMemcpy`
(`CudaAllocator::malloc_async` -> `move_to_unified_memory`, mlx/backend/cuda/allocator.cpp).
In the concurrency bench on the H200 (session 21, py-spy) the engine thread spent ~10 % of
its step-loop time there, 62 of 91 samples while building a prompt chunk's view. So a
step's index arrays go up in one allocation (`upload`: one array, the rest views into
it), and arrays whose values repeat from step to step (sampling settings, padding rows'
routing, the rows' token order) are made once (`constant`). A view or a cached array is
no allocation. Metal and the CPU share one memory: there this only saves small arrays.
"""
from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

_CONSTANTS = 512    # distinct cached arrays (settings of a few batches; tiny each)


def upload(parts: list[np.ndarray], dtype=np.int32) -> list[mx.array]:
    """The parts as device arrays of their own shapes, made from one host array."""
    flat = np.concatenate([np.asarray(p, dtype).ravel() for p in parts])
    whole = mx.array(flat)
    out, start = [], 0
    for p in parts:
        n = int(np.prod(np.shape(p), dtype=np.int64))
        out.append(whole[start:start + n].reshape(np.shape(p)))
        start += n
    return out


@lru_cache(maxsize=_CONSTANTS)
def constant(values: tuple, dtype=mx.float32) -> mx.array:
    """mx.array(values, dtype), made once per distinct (values, dtype) (an array of host
    values holds its data from the start: nothing to evaluate). values: a tuple
    (hashable); the result must never be written in place."""
    return mx.array(values, dtype=dtype)
