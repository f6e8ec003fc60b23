"""A decode row's residual add, the RMSNorm after it and the MoE router's product, in one launch.

    h  = x + r                                             # in x's dtype, as `x + r` rounds it
    hn = h * rsqrt(mean(h^2) + eps) * norm_weight          # float32 math, rounded once
    y[n] = sum_k hn[k] * (scale[n, g(k)] * q[n, k] + bias[n, g(k)])     x, r [1, K], y [1, N]

After its mixer, a MoE layer adds the mixer's output to the residual stream, normalises
the sum (kernels/add_rms_norm: one launch) and multiplies it by the router joined with
the shared expert's gate (8-bit, E + 1 rows: MLX's qmv, a second launch); the experts'
kernels (kernels/moe_block.py) then read hn and add h back. At one decode row (B=1) the
step is bound by the host, which pays MLX's per-launch cost (about 10 us on the H100,
docs/PERFORMANCE.md "nodes a step") for each of those 40 + 40 launches. The router is
small (257 rows of 2,048 at 8 bits: 0.5 MB), so a launch of few blocks, each of which
adds and normalises the row itself (8 KB read) before its rows of the product: no
cross-block step, 40 launches a B=1 step fewer. Block 0 also writes h and hn for the
experts' kernels.

The add and the norm round as kernels/add_rms_norm does (h in x's dtype; hn rounded once
from float32), so the one difference from the two launches is the order of the sum of
squares (a last-bit change of the rsqrt, which may move an element of hn by one ulp);
the product is kernels/qmv_normed's (float32 sums, y rounded to x's dtype once), whose
weight loads, layout and limits this shares (HOIST, BLOCK_INV, PRODUCT).

CUDA only (kernels/backend.py CUDA_ONLY): on Metal, add_rms_norm's and MLX's qmv run.
Off at load until timed on a GPU (kernels/backend.py OFF_AT_LOAD).
"""
from __future__ import annotations

import mlx.core as mx

import kernels.qmv_normed as qn
from kernels.kernel_build import KernelBuild, scalar

NAME = "add_norm_qmv"

# 1. h = x + r into shared memory, its sum of squares; then hn in place of h, rounded as
# kernels/add_rms_norm rounds it, and block 0 writes both out. Each thread reads back only
# the elements it wrote, so the pass needs no barrier of its own.
_ADD_NORM = """
  // 1. h = x + r and rms_norm(h) * weight (rounded once) into shared memory
  float ss = 0.f;
  for (int k = tid; k < K; k += blockDim.x) {
    const float f = static_cast<float>(static_cast<OT>(static_cast<float>(x[k])
                                                       + static_cast<float>(r[k])));
    xs[k + k / 32 * PAD] = f;
    ss += f * f;
  }
"""

_ADD_NORM_WRITE = """
  for (int k = tid; k < K; k += blockDim.x) {
    const float f = xs[k + k / 32 * PAD];
    const OT v = static_cast<OT>(f * inv * static_cast<float>(norm_weight[k]));
    xs[k + k / 32 * PAD] = static_cast<float>(v);
    if (blockIdx.x == 0) {
      h[k] = static_cast<OT>(f);
      hn[k] = v;
    }
  }
  __syncthreads();
"""

_CUDA_SOURCE = qn.HOIST + _ADD_NORM + qn.BLOCK_INV + _ADD_NORM_WRITE + qn.PRODUCT

_KERNEL = KernelBuild(NAME, "tandem_add_norm_qmv",
                      ["x", "r", "norm_weight", "eps", "w", "scales", "biases"],
                      ["y", "h", "hn"], _CUDA_SOURCE, "")


def applies(x, r, norm_weight, w, scales, biases, group_size: int, bits: int) -> bool:
    """qmv_normed's contract (one row, K a multiple of a warp's turn, at most MAX_K, a 4-
    or 8-bit affine weight of x's dtype) with r of x's shape and dtype: the router of the
    Qwen3.5 MoE models (K = hidden 2,048, 8 bits)."""
    return (r.shape == x.shape and r.dtype == x.dtype
            and qn.applies(x, norm_weight, w, scales, biases, group_size, bits))


def kernel(x, r, norm_weight, eps: float, w, scales, biases, group_size: int, bits: int, *,
           backend: str) -> tuple[mx.array, mx.array, mx.array]:
    """Launch on `backend` ('cuda', or the counting stand-in): (h [1, K], hn [1, K],
    y [1, N]), each in x's dtype."""
    K, N = x.shape[1], w.shape[0]
    y, h, hn = _KERNEL.get(backend)(
        inputs=[x, r, norm_weight, scalar(float(eps)), w, scales, biases],
        **qn.launch(x, w, group_size, bits),
        output_shapes=[(1, N), (1, K), (1, K)], output_dtypes=[x.dtype] * 3)
    return h, hn, y


def added_normed(x, r, norm_weight, eps: float) -> tuple[mx.array, mx.array]:
    """Plain-mx (h, hn), rounded as the kernel's first half rounds them."""
    h = (x.astype(mx.float32) + r.astype(mx.float32)).astype(x.dtype)
    hf = h.astype(mx.float32)
    inv = mx.rsqrt(mx.mean(hf * hf, axis=-1, keepdims=True) + eps)
    return h, (hf * inv * norm_weight.astype(mx.float32)).astype(x.dtype)


def reference(x, r, norm_weight, eps: float, w, scales, biases, group_size: int,
              bits: int) -> tuple[mx.array, mx.array, mx.array]:
    """Plain-mx float32: (h, hn) rounded as the kernel rounds them, and hn times the
    dequantized weight, y unrounded (the tests' and the self-test's yardstick)."""
    h, hn = added_normed(x, r, norm_weight, eps)
    return h, hn, hn.astype(mx.float32) @ qn.dequantized(w, scales, biases, group_size, bits).T


def magnitude(x, r, norm_weight, eps: float, w, scales, biases, group_size: int,
              bits: int) -> mx.array:
    """sum_k |hn[k] w[n, k]| [1, N]: the scale a wrong row, column or group is off by."""
    _, hn = added_normed(x, r, norm_weight, eps)
    return (mx.abs(hn.astype(mx.float32))
            @ mx.abs(qn.dequantized(w, scales, biases, group_size, bits)).T)
