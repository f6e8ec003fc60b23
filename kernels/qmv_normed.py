"""A decode row's input RMSNorm and the quantized projection after it, in one launch.

    xn = rms_norm(x) * norm_weight                        # as mx.fast.rms_norm rounds it
    y[n] = sum_k xn[k] * (scale[n, g(k)] * q[n, k] + bias[n, g(k)])        x [1, K], y [1, N]

A decoder layer's input norm has one reader, its mixer's joined input projection. At one
decode row (B=1) the step is bound by the host, which pays MLX's per-launch cost (about
10 us on the H100, docs/PERFORMANCE.md "nodes a step") for each of the 40 norms of the
Qwen3.5 hybrid as for any other launch. A matrix-vector product reads all of x in every
block anyway, so each block normalises x itself: 40 launches (and the norms' writes and
reads of xn) fewer a B=1 step. The norm is mx.fast.rms_norm's, rounding for rounding:
t = T(x * rsqrt(mean(x^2) + eps)) and xn = T(w * t) in x's dtype T (MLX's CUDA and Metal
rms_norm), so the one difference from the two launches is the order of the sum of
squares (a last-bit change of the rsqrt, which may move an element of xn by one ulp).

The weights are MLX's affine quantization (``mx.quantize``, 4 or 8 bits): w uint32
[N, K * bits / 32], scales and biases [N, K / group] in x's dtype. Each group's part of
the product is sum_k xn[k] * (s q[k] + b) = s * sum_k xn[k] q[k] + b * sum_k xn[k], in
float32; y is rounded to T once.

Layout: a block of WARPS warps normalises x into shared memory (float, padded so each
lane's 16-byte reads are conflict-free) and keeps it; each warp takes ROWS_PER_WARP
weight rows, a lane a 16-byte slice of each row per turn (32 weights at 4 bits, 16 at 8)
with its xn values in registers, and a row's sum is one warp reduction.

CUDA only (kernels/backend.py CUDA_ONLY): on Metal, MLX's own norm and qmv run.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild, scalar

NAME = "qmv_normed"
WARPS = 8                 # warps a block
ROWS_PER_WARP = 4         # weight rows a warp
BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)   # a lane's 16-byte slice (32 or 16 weights) lies in one group
MAX_K = 4096              # xn in registers: K / 32 floats a lane
PAD = 4                   # floats of shared memory after every 32 (conflict-free reads)
DTYPES = (mx.bfloat16, mx.float16, mx.float32)

# The body in parts: the weights' first rows loaded (HOIST), the norm into shared memory
# (its sum of squares, BLOCK_INV: the block's reduction of it, its rounding), the product
# (PRODUCT). kernels/add_norm_qmv.py puts its own norm between the same parts.
HOIST = """
  constexpr int WPL = 128 / BITS;               // weights a lane reads a turn (16 bytes)
  constexpr int TURN = 32 * WPL;                // columns a warp covers a turn
  constexpr int TURNS = K / TURN;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  __shared__ float xs[K + K / 32 * PAD];
  __shared__ float part[32];
  const int N = w_shape[0];
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  // 0. the warp's first HOIST rows' words, scales and biases are loaded before the norm,
  // so their DRAM latency runs under its two passes over x and three barriers (loaded
  // after them, each block waited for both in turn: 33.5 us a projection on the H100
  // against MLX's rms_norm + qmv at ~22, session 32). HOIST keeps the words within 32
  // registers a lane.
  constexpr int HOIST = ROWS_PER_WARP * TURNS <= 8 ? ROWS_PER_WARP : 8 / TURNS > 0 ? 8 / TURNS : 1;
  const int wpr = K * BITS / 32;                // uint32 words a weight row
  const int gpr = K / GS;                       // groups a row
  const int row0 = (blockIdx.x * WARPS + warp) * ROWS_PER_WARP;
  uint4 ph[HOIST][TURNS];
  float sh[HOIST][TURNS], bh[HOIST][TURNS];
#pragma unroll
  for (int i = 0; i < HOIST; ++i) {
    const int n = row0 + i;
    if (n < N) {
      const uint4* wr = reinterpret_cast<const uint4*>(w + size_t(n) * wpr);
#pragma unroll
      for (int t = 0; t < TURNS; ++t) {
        const int g = (t * TURN + lane * WPL) / GS;
        ph[i][t] = wr[t * 32 + lane];
        sh[i][t] = static_cast<float>(scales[size_t(n) * gpr + g]);
        bh[i][t] = static_cast<float>(biases[size_t(n) * gpr + g]);
      }
    }
  }
"""

_NORM = """
  // 1. rms_norm(x) * weight into shared memory, rounded as mx.fast.rms_norm rounds it
  float ss = 0.f;
  for (int k = tid; k < K; k += blockDim.x) {
    const float f = static_cast<float>(x[k]);
    ss += f * f;
  }
"""

BLOCK_INV = """
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (tid < 32) {
    float t = tid < (blockDim.x + 31) / 32 ? part[tid] : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (tid == 0) part[0] = t;
  }
  __syncthreads();
  const float inv = rsqrtf(part[0] / K + eps[0]);
"""

_NORM_WRITE = """
  for (int k = tid; k < K; k += blockDim.x) {
    const OT t = static_cast<OT>(static_cast<float>(x[k]) * inv);
    xs[k + k / 32 * PAD] = static_cast<float>(
        static_cast<OT>(static_cast<float>(norm_weight[k]) * static_cast<float>(t)));
  }
  __syncthreads();
"""

PRODUCT = """
  // 2. this lane's xn values (its WPL columns of every turn) and their sums
  float xr[TURNS][WPL];
  float xsum[TURNS];
#pragma unroll
  for (int t = 0; t < TURNS; ++t) {
    xsum[t] = 0.f;
#pragma unroll
    for (int j = 0; j < WPL; ++j) {
      const int k = t * TURN + lane * WPL + j;
      xr[t][j] = xs[k + k / 32 * PAD];
      xsum[t] += xr[t][j];
    }
  }
  // 3. the warp's rows: s * sum(xn q) + b * sum(xn) a group slice, one reduction a row
#pragma unroll
  for (int i = 0; i < ROWS_PER_WARP; ++i) {
    const int n = row0 + i;
    if (n >= N) break;
    const uint4* wr = reinterpret_cast<const uint4*>(w + size_t(n) * wpr);
    uint4 p[TURNS];
    float sp[TURNS], bp[TURNS];
#pragma unroll
    for (int t = 0; t < TURNS; ++t) {
      const int g = (t * TURN + lane * WPL) / GS;
      p[t] = i < HOIST ? ph[i < HOIST ? i : 0][t] : wr[t * 32 + lane];
      sp[t] = i < HOIST ? sh[i < HOIST ? i : 0][t] : static_cast<float>(scales[size_t(n) * gpr + g]);
      bp[t] = i < HOIST ? bh[i < HOIST ? i : 0][t] : static_cast<float>(biases[size_t(n) * gpr + g]);
    }
    float acc = 0.f;
#pragma unroll
    for (int t = 0; t < TURNS; ++t) {
      const float s = sp[t];
      const float b = bp[t];
      const unsigned ws[4] = {p[t].x, p[t].y, p[t].z, p[t].w};
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < WPL; ++j) {
        const unsigned q = (ws[(j * BITS) / 32] >> ((j * BITS) % 32)) & MASK;
        dot = fmaf(xr[t][j], static_cast<float>(q), dot);
      }
      acc = fmaf(s, dot, fmaf(b, xsum[t], acc));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) y[n] = static_cast<OT>(acc);
  }
"""

_CUDA_SOURCE = HOIST + _NORM + BLOCK_INV + _NORM_WRITE + PRODUCT

_KERNEL = KernelBuild(NAME, "tandem_qmv_normed",
                      ["x", "norm_weight", "eps", "w", "scales", "biases"], ["y"],
                      _CUDA_SOURCE, "")


def applies(x, norm_weight, w, scales, biases, group_size: int, bits: int) -> bool:
    """One row x [1, K] and a 4- or 8-bit affine weight of its dtype, K a multiple of a
    warp's turn (1,024 columns at 4 bits, 512 at 8) and at most MAX_K: every input
    projection of the Qwen3.5 models (K = hidden 2,048)."""
    if x.ndim != 2 or x.shape[0] != 1 or w.ndim != 2 or biases is None:
        return False
    K = x.shape[1]
    return (bits in BITS and group_size in GROUP_SIZES and x.dtype in DTYPES
            and norm_weight.shape == (K,) and norm_weight.dtype == x.dtype
            and K % (32 * 128 // bits) == 0 and K <= MAX_K and w.dtype == mx.uint32
            and w.shape[1] * 32 == K * bits and scales.shape == (w.shape[0], K // group_size)
            and biases.shape == scales.shape and scales.dtype == biases.dtype == x.dtype)


def launch(x, w, group_size: int, bits: int) -> dict:
    """The template and grid of this layout for one row x [1, K] and weight w [N, ...]:
    a block of WARPS warps per WARPS * ROWS_PER_WARP rows (kernels/add_norm_qmv.py's too)."""
    K, N = x.shape[1], w.shape[0]
    rows = WARPS * ROWS_PER_WARP
    return dict(template=[("K", K), ("BITS", bits), ("GS", group_size), ("WARPS", WARPS),
                          ("ROWS_PER_WARP", ROWS_PER_WARP), ("PAD", PAD), ("OT", x.dtype)],
                grid=(-(-N // rows) * 32 * WARPS, 1, 1), threadgroup=(32 * WARPS, 1, 1))


def kernel(x, norm_weight, eps: float, w, scales, biases, group_size: int, bits: int, *,
           backend: str) -> mx.array:
    """Launch on `backend` ('cuda', or the counting stand-in): y [1, N] in x's dtype."""
    return _KERNEL.get(backend)(
        inputs=[x, norm_weight, scalar(float(eps)), w, scales, biases],
        **launch(x, w, group_size, bits),
        output_shapes=[(1, w.shape[0])], output_dtypes=[x.dtype])[0]


def normed(x, norm_weight, eps: float) -> mx.array:
    """Plain-mx xn, rounded as mx.fast.rms_norm rounds it (the kernel's first half)."""
    xf = x.astype(mx.float32)
    inv = mx.rsqrt(mx.mean(xf * xf, axis=-1, keepdims=True) + eps)
    t = (xf * inv).astype(x.dtype)
    return (norm_weight.astype(mx.float32) * t.astype(mx.float32)).astype(x.dtype)


def dequantized(w, scales, biases, group_size: int, bits: int) -> mx.array:
    """The weight [N, K] in float32 (the references' and magnitudes')."""
    return mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32),
                         group_size=group_size, bits=bits)


def reference(x, norm_weight, eps: float, w, scales, biases, group_size: int,
              bits: int) -> mx.array:
    """Plain-mx float32: xn (rounded as the norm rounds it) times the dequantized weight,
    y unrounded (the tests' and the self-test's yardstick)."""
    wf = dequantized(w, scales, biases, group_size, bits)
    return normed(x, norm_weight, eps).astype(mx.float32) @ wf.T


def magnitude(x, norm_weight, eps: float, w, scales, biases, group_size: int,
              bits: int) -> mx.array:
    """sum_k |xn[k] w[n, k]| [1, N]: the scale a wrong row, column or group is off by."""
    wf = dequantized(w, scales, biases, group_size, bits)
    return mx.abs(normed(x, norm_weight, eps).astype(mx.float32)) @ mx.abs(wf).T
