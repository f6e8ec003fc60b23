"""SwiGLU read from the joined gate+up projection, unsplit, in one launch.

Per row n of a [N, W] (the joined gate_up output: gate in columns [0, I), up in
[UC, UC + I), W >= UC + I, any padding after), in float32:

    y[n, i] = silu(a[n, i]) * a[n, UC + i]              # cast to a's dtype once

The plain path splits the joined output (a Split node) and runs the compiled swiglu (a
launch): two nodes a dense MLP, here one. The launch count is the same; what goes is a
node MLX walks and encodes on the host every step (a B=1 decode step is host-bound on a
GPU: docs/PERFORMANCE.md). The plain path rounds gate * sigmoid(gate) to the dtype before
the product with up; this rounds once, so the two differ by the dtype's rounding.

One thread an element.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild

NAME = "swiglu_joined"
THREADS = 256

_CUDA_SOURCE = """
  const int N = a_shape[0], W = a_shape[1];
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(N) * I) return;
  const size_t n = idx / I, i = idx - n * I;
  const float g = static_cast<float>(a[n * W + i]);
  const float u = static_cast<float>(a[n * W + UC + i]);
  y[idx] = static_cast<T>(g / (1.f + expf(-g)) * u);   // expf: 2 ulps (__expf grows with |g|)
"""

# Same layout for Metal; it cannot run on the Linux machines: the self-test guards it.
_METAL_SOURCE = """
  const int N = a_shape[0], W = a_shape[1];
  const size_t idx = size_t(thread_position_in_grid.x);
  if (idx >= size_t(N) * I) return;
  const size_t n = idx / I, i = idx - n * I;
  const float g = static_cast<float>(a[n * W + i]);
  const float u = static_cast<float>(a[n * W + UC + i]);
  y[idx] = static_cast<T>(g / (1.0f + metal::exp(-g)) * u);
"""

_KERNEL = KernelBuild(NAME, "tandem_swiglu_joined", ["a"], ["y"], _CUDA_SOURCE, _METAL_SOURCE)


def reference(a: mx.array, up_col: int, width: int) -> mx.array:
    """Plain-mx float32: silu(a[:, :width]) * a[:, up_col:up_col + width], in a's dtype."""
    g = a[:, :width].astype(mx.float32)
    u = a[:, up_col:up_col + width].astype(mx.float32)
    return (g * mx.sigmoid(g) * u).astype(a.dtype)


def applies(a: mx.array, up_col: int, width: int) -> bool:
    return (a.ndim == 2 and a.shape[0] > 0 and mx.issubdtype(a.dtype, mx.floating)
            and 0 < width <= up_col
            and up_col + width <= a.shape[1])


def kernel(a: mx.array, up_col: int, width: int, *, backend: str) -> mx.array:
    """Launch on `backend`: y [N, width] in a's dtype, as `reference`."""
    N = a.shape[0]
    total = N * width
    return _KERNEL.get(backend)(
        inputs=[a], template=[("T", a.dtype), ("I", width), ("UC", up_col)],
        grid=(-(-total // THREADS) * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
        output_shapes=[(N, width)], output_dtypes=[a.dtype])[0]
