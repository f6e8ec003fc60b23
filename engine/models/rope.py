"""Rotary embeddings with per-row offsets (each row of a batch sits at its own position)."""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn


def llama3_freqs(dims: int, base: float, scaling: dict) -> mx.array:
    """Llama 3.x frequency smoothing between the low- and high-frequency bands."""
    factor = scaling["factor"]
    low = scaling.get("low_freq_factor", 1.0)
    high = scaling.get("high_freq_factor", 4.0)
    old_ctx = scaling.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    freqs = base ** (mx.arange(0, dims, 2, dtype=mx.float32) / dims)
    wavelens = 2 * math.pi * freqs
    freqs = mx.where(wavelens > low_wavelen, freqs * factor, freqs)
    is_medium = (wavelens > high_wavelen) & (wavelens < low_wavelen)
    smooth = (old_ctx / wavelens - low) / (high - low)
    smoothed = freqs / ((1 - smooth) / factor + smooth)
    return mx.where(is_medium, smoothed, freqs)


class RoPE(nn.Module):
    """Rotates the first ``dims`` features of [B, H, T, D] by each row's offset."""

    def __init__(self, dims: int, base: float, traditional: bool = False,
                 scaling: dict | None = None):
        super().__init__()
        self.dims = dims
        self.traditional = traditional
        self.base = base
        self.scale = 1.0
        kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
        self._freqs = None
        if kind == "llama3":
            self._freqs = llama3_freqs(dims, base, scaling)
        elif kind == "linear":
            self.scale = 1.0 / scaling["factor"]

    def __call__(self, x: mx.array, offsets: mx.array) -> mx.array:
        base = None if self._freqs is not None else self.base
        return mx.fast.rope(x, self.dims, traditional=self.traditional, base=base,
                            scale=self.scale, offset=offsets, freqs=self._freqs)
