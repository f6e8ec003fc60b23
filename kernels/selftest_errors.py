"""The self-test's error measures: what a check returns, past a kernel's own rounding."""
from __future__ import annotations

import mlx.core as mx


def abs_err(a, b) -> float:
    """The largest |a - b|, in float32."""
    return mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()


def err_past_bf16(out, exact) -> float:
    """A bf16 output against the unrounded float32 result: the error beyond the output's
    own rounding (round to nearest, 8 significant bits: at most 2**-8 of the value)."""
    gap = mx.abs(out.astype(mx.float32) - exact) - 2.0 ** -8 * mx.abs(exact)
    return max(0.0, gap.max().item())
