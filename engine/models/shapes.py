"""Reshapes that add no graph node where nothing changes.

MLX returns an array unchanged from ``reshape`` only when the shape is given exactly; a
shape with -1 always builds a Reshape node, even onto the same shape. Every node of a
compiled decode step is replayed on the host each step (on CUDA the host, not the GPU,
bounds a B=1 step: docs/PERFORMANCE.md), so the decode path's no-op reshapes go here.
"""
from __future__ import annotations

import math

import mlx.core as mx


def reshaped(x: mx.array, *shape: int) -> mx.array:
    """x.reshape(*shape), with at most one -1 resolved first; x itself where its shape
    is already that one."""
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    return x if tuple(x.shape) == shape else x.reshape(shape)
