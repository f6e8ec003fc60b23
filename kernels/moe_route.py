"""MoE router: softmax over E experts, top-k, optional renormalisation, in one kernel.

logits [N, E] (any float dtype) -> (indices [N, k] int32, weights [N, k] float32),
each row sorted by descending probability; ties go to the lower expert id.
With normalize (Qwen's norm_topk_prob) the k weights sum to 1; without, they
are the full-softmax probabilities of the chosen experts.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild

NAME = "moe_route"

# One warp per token row. Lane holds experts e = i*32 + lane (coalesced loads);
# k rounds of a warp arg-max pick the experts, the winner's lane retires it.
_CUDA_SOURCE = """
  constexpr int EPL = E / 32;
  const int N = logits_shape[0];
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;                       // whole warps: blockDim is a multiple of 32
  const auto* x = logits + size_t(row) * E;
  float p[EPL];
  float mx_ = NEG_INF;
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    p[i] = static_cast<float>(x[i * 32 + lane]);
    mx_ = fmaxf(mx_, p[i]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx_ = fmaxf(mx_, __shfl_xor_sync(0xffffffffu, mx_, off));
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < EPL; ++i) { p[i] = __expf(p[i] - mx_); sum += p[i]; }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  unsigned taken = 0u;                         // bit i: expert i*32+lane already chosen
  float my_w = 0.f, picked = 0.f;
  int my_i = 0;
  for (int kk = 0; kk < K; ++kk) {
    float bv = -1.f;
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      if (!(taken >> i & 1u) && p[i] > bv) { bv = p[i]; bi = i * 32 + lane; }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    if (lane == kk) { my_w = bv; my_i = bi; }
    picked += bv;
  }
  if (lane < K) {
    const float denom = NORM ? picked : sum;
    indices[size_t(row) * K + lane] = my_i;
    weights[size_t(row) * K + lane] = my_w / denom;
  }
"""

_METAL_SOURCE = """
  constexpr int EPL = E / 32;
  const int N = logits_shape[0];
  const int row = int(thread_position_in_grid.x) / 32;
  const int lane = int(thread_index_in_simdgroup);
  if (row >= N) return;
  auto x = logits + size_t(row) * E;
  float p[EPL];
  float mx_ = -INFINITY;
  for (int i = 0; i < EPL; ++i) {
    p[i] = static_cast<float>(x[i * 32 + lane]);
    mx_ = fmax(mx_, p[i]);
  }
  mx_ = simd_max(mx_);
  float sum = 0.0f;
  for (int i = 0; i < EPL; ++i) { p[i] = metal::exp(p[i] - mx_); sum += p[i]; }
  sum = simd_sum(sum);
  uint taken = 0u;
  float my_w = 0.0f, picked = 0.0f;
  int my_i = 0;
  for (int kk = 0; kk < K; ++kk) {
    float bv = -1.0f;
    int bi = 0x7fffffff;
    for (int i = 0; i < EPL; ++i) {
      if (!((taken >> i) & 1u) && p[i] > bv) { bv = p[i]; bi = i * 32 + lane; }
    }
    for (ushort off = 16; off > 0; off >>= 1) {
      const float ov = simd_shuffle_xor(bv, off);
      const int oi = simd_shuffle_xor(bi, off);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    if (lane == kk) { my_w = bv; my_i = bi; }
    picked += bv;
  }
  if (lane < K) {
    const float denom = NORM ? picked : sum;
    indices[size_t(row) * K + lane] = my_i;
    weights[size_t(row) * K + lane] = my_w / denom;
  }
"""

_KERNEL = KernelBuild(NAME, "tandem_moe_route", ["logits"], ["indices", "weights"],
                      _CUDA_SOURCE, _METAL_SOURCE,
                      cuda_header="#define NEG_INF (-__int_as_float(0x7f800000))\n")


def _get(backend: str):
    return _KERNEL.get(backend)


def reference(logits, k: int, normalize: bool = True):
    """Plain-mx float32: full softmax, stable sort by descending probability, take k."""
    probs = mx.softmax(logits.astype(mx.float32), axis=-1)              # [N, E]
    order = mx.argsort(-probs, axis=-1)[:, :k].astype(mx.int32)         # [N, k]
    weights = mx.take_along_axis(probs, order, axis=-1)                 # [N, k]
    if normalize:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return order, weights


def applies(logits, k: int) -> bool:
    E = logits.shape[-1]
    return logits.ndim == 2 and E % 32 == 0 and E <= 1024 and 1 <= k <= min(32, E)


def kernel(logits, k: int, normalize: bool = True, *, backend: str):
    """Launch on `backend`. Same returns as `reference`."""
    N, E = logits.shape
    return _get(backend)(
        inputs=[logits], template=[("E", E), ("K", k), ("NORM", bool(normalize))],
        grid=(N * 32, 1, 1), threadgroup=(128, 1, 1),
        output_shapes=[(N, k), (N, k)], output_dtypes=[mx.int32, mx.float32])
