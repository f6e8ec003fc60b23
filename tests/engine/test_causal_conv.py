"""The Gated DeltaNet's causal conv + SiLU (engine/models/elementwise.causal_conv_silu)
against an independent float64 numpy loop, and its graph: one fused kernel."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from float32_tolerance import tolerance

from engine.bench.profile_ops import ops_by_primitive
from engine.models.elementwise import causal_conv_silu

B, C, K = 3, 96, 4


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """out[b, t, c] = silu(sum_j x[b, t + j, c] * w[c, j]), float64, position by position."""
    x, w = x.astype(np.float64), w[:, :, 0].astype(np.float64)
    T = x.shape[1] - K + 1
    out = np.zeros((x.shape[0], T, x.shape[2]))
    for t in range(T):
        y = (x[:, t:t + K, :] * w.T[None]).sum(axis=1)
        out[:, t] = y / (1 + np.exp(-y))
    return out


@pytest.mark.parametrize("T", [1, 7, 64])
def test_float32_matches_the_float64_loop(T):
    r = np.random.default_rng(T)
    x = r.standard_normal((B, K - 1 + T, C)).astype(np.float32)
    w = r.standard_normal((C, K, 1)).astype(np.float32)
    ref = reference(x, w)
    got = np.array(causal_conv_silu(mx.array(x), mx.array(w)))
    assert got.shape == (B, T, C)
    # K products, K - 1 adds, the sigmoid's exp/divide and the last multiply
    assert np.abs(got - ref).max() <= tolerance(ref, 2 * K + 3)


def test_bf16_rounds_once_at_the_end():
    """In bf16 the sum runs in float32 and the output is that float32 value rounded to
    bf16 (as kernels/gdn_conv_step): the error is within half a bf16 ulp of it."""
    r = np.random.default_rng(1)
    x = mx.array(r.standard_normal((B, K - 1 + 16, C)).astype(np.float32)).astype(mx.bfloat16)
    w = mx.array(r.standard_normal((C, K, 1)).astype(np.float32)).astype(mx.bfloat16)
    exact = causal_conv_silu(x.astype(mx.float32), w.astype(mx.float32))
    got = causal_conv_silu(x, w)
    assert got.dtype == mx.bfloat16
    assert mx.array_equal(got, exact.astype(mx.bfloat16)).item()


def test_one_fused_kernel_whatever_the_dtypes():
    for dx, dw in ((mx.float32, mx.float32), (mx.bfloat16, mx.bfloat16),
                   (mx.bfloat16, mx.float32)):
        x, w = mx.zeros((2, K - 1 + 5, C), dx), mx.zeros((C, K, 1), dw)
        mx.eval(x, w)
        ops = ops_by_primitive(causal_conv_silu(x, w))
        assert sum(ops.values()) == 1 and next(iter(ops)).startswith("Compiled"), ops
