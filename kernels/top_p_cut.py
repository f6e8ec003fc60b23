"""Top-p's cut over a whole vocabulary in one launch: a radix select by mass.

The sampler (engine/core/sampler.py, `_top_p_keep`) ranks ids by key = the int32 bits
of -d >= 0 (d = scaled logit - row max <= 0; smaller key = likelier) and keeps those
likelier than the cut: the largest key t whose strictly-likelier mass
G(t) = sum(w[key < t]) is below target (= top_p x the row's total). Its plain path finds
t by 31 halvings of the key range, each a masked sum over the row: ~190 launches and 31
passes over [B, V] (1.0-2.2 ms on the H200 at V = 248,320, session 11). Here one block a
row finds it in 8 passes of 4 bits (bits 30..27, ..., 6..3, then 2..0): each pass sums
the weights of the ids inside the current prefix into 16 bins, and the cut's bin is
the last whose mass before it is below target, so the prefix gains 4 bits.

Deterministic: each thread sums its own ids in a fixed order, warps add by shuffles,
warps' bins are added in warp order: the same row gives the same cut in any batch.
Float32 sums in a tree of fixed shape: off the exact mass by at most (log2 V + 2) ulps
of the total (the tests' bound), like the plain path's two-level sums.

key [B, V] int32 (>= 0), weights [B, V] float32, target [B, 1] float32 -> [B, 1] int32.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild

NAME = "top_p_cut"
THREADS = 1024      # one block a row; 32 warps
BINS = 16
PASSES = ((27, 15), (23, 15), (19, 15), (15, 15), (11, 15), (7, 15), (3, 15), (0, 7))

_PASS_LOOP_CUDA = """
  const int V = key_shape[1];
  const int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int nthreads = int(blockDim.x), nwarps = nthreads / 32;
  constexpr int UNROLL = 2;                        // 40 registers: 1,024 threads fit (nvcc sm_90a)
  const int* k = key + size_t(row) * V;
  const float* w = weights + size_t(row) * V;
  const float goal = target[row];
  __shared__ float part[32][16];
  __shared__ float mass_s[16];
  __shared__ float before_s;
  __shared__ int prefix_s;
  if (tid == 0) { before_s = 0.f; prefix_s = 0; }
  __syncthreads();
  // Four ids a load, UNROLL loads in flight a thread: one block reads the row 8 times,
  // and one load at a time left it waiting on memory (0.60 ms at V = 248k, session 32).
  // Rows start 16-byte aligned when V % 4 == 0 and the array does (MLX's buffers do):
  // the choice is the array's, so a row takes the same path alone or in any batch.
  const bool by4 = V % 4 == 0 && reinterpret_cast<size_t>(key) % 16 == 0
                   && reinterpret_cast<size_t>(weights) % 16 == 0;
  const int V4 = by4 ? V / 4 : 0;                  // ids [0, 4 V4) by fours, the rest alone
  const int4* k4 = reinterpret_cast<const int4*>(k);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int shifts[8] = {27, 23, 19, 15, 11, 7, 3, 0};
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = shifts[pass];
    const int high = shift + (pass == 7 ? 3 : 4);            // bits at or above: the prefix
    const unsigned prefix = static_cast<unsigned>(prefix_s);
    const unsigned hmask = high >= 31 ? 0u : (0xffffffffu << high);
    float bins[16];
#pragma unroll
    for (int b = 0; b < 16; ++b) bins[b] = 0.f;
#define TPC_ADD(KK, WI) { \\
      const int bin_ = int(((KK) >> shift) & 15u); \\
      _Pragma("unroll") for (int b = 0; b < 16; ++b) bins[b] += (b == bin_) ? (WI) : 0.f; }
    for (int base = tid; base < V4; base += UNROLL * nthreads) {
      int4 kv[UNROLL];
      float4 wv[UNROLL];
      unsigned in[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int i = base + u * nthreads;
        kv[u] = i < V4 ? k4[i] : int4{0, 0, 0, 0};
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {         // each id inside the prefix: a bit of in[u]
        const int i = base + u * nthreads;
        in[u] = i >= V4 ? 0u
              : ((static_cast<unsigned>(kv[u].x) & hmask) == prefix ? 1u : 0u)
              | ((static_cast<unsigned>(kv[u].y) & hmask) == prefix ? 2u : 0u)
              | ((static_cast<unsigned>(kv[u].z) & hmask) == prefix ? 4u : 0u)
              | ((static_cast<unsigned>(kv[u].w) & hmask) == prefix ? 8u : 0u);
        wv[u] = in[u] ? w4[i] : float4{0.f, 0.f, 0.f, 0.f};
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (in[u] & 1u) TPC_ADD(static_cast<unsigned>(kv[u].x), wv[u].x)
        if (in[u] & 2u) TPC_ADD(static_cast<unsigned>(kv[u].y), wv[u].y)
        if (in[u] & 4u) TPC_ADD(static_cast<unsigned>(kv[u].z), wv[u].z)
        if (in[u] & 8u) TPC_ADD(static_cast<unsigned>(kv[u].w), wv[u].w)
      }
    }
    for (int i = 4 * V4 + tid; i < V; i += nthreads) {
      const unsigned kk = static_cast<unsigned>(k[i]);
      if ((kk & hmask) == prefix) TPC_ADD(kk, w[i])
    }
#undef TPC_ADD
#pragma unroll
    for (int b = 0; b < 16; ++b) {
      float s = bins[b];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) part[warp][b] = s;
    }
    __syncthreads();
    if (tid < 16) {                       // a bin a thread, its warps' sums in warp order
      float s = 0.f;
      for (int q = 0; q < nwarps; ++q) s += part[q][tid];
      mass_s[tid] = s;
    }
    __syncthreads();
    if (tid == 0) {
      int chosen = 0;                     // the last bin whose mass before it is < goal
      float at = before_s, chosen_before = before_s;
      for (int b = 0; b < 16; ++b) {
        if (at < goal) { chosen = b; chosen_before = at; }
        at += mass_s[b];
      }
      before_s = chosen_before;
      prefix_s = int(prefix | (unsigned(chosen) << shift));
    }
    __syncthreads();
  }
  if (tid == 0) cut[row] = prefix_s;
"""

_METAL_SOURCE = """
  const int V = key_shape[1];
  const int row = int(threadgroup_position_in_grid.x);
  const int tid = int(thread_position_in_threadgroup.x);
  const int lane = int(thread_index_in_simdgroup), warp = tid / 32;   // 32-wide simdgroups
  const int nthreads = int(threads_per_threadgroup.x);
  device const int* k = key + size_t(row) * V;
  device const float* w = weights + size_t(row) * V;
  const float goal = target[row];
  threadgroup float part[32][16];
  threadgroup float before_s;
  threadgroup int prefix_s;
  if (tid == 0) { before_s = 0.0f; prefix_s = 0; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int shifts[8] = {27, 23, 19, 15, 11, 7, 3, 0};
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = shifts[pass];
    const int high = shift + (pass == 7 ? 3 : 4);
    const int prefix = prefix_s;
    const uint hmask = high >= 31 ? 0u : (0xffffffffu << high);
    float bins[16];
    for (int b = 0; b < 16; ++b) bins[b] = 0.0f;
    for (int i = tid; i < V; i += nthreads) {
      const uint kk = uint(k[i]);
      if ((kk & hmask) == uint(prefix)) {
        const int bin = int((kk >> shift) & 15u);
        const float wi = w[i];
        for (int b = 0; b < 16; ++b) bins[b] += (b == bin) ? wi : 0.0f;
      }
    }
    for (int b = 0; b < 16; ++b) {
      const float s = simd_sum(bins[b]);
      if (lane == 0) part[warp][b] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
      float before = before_s, mass[16];
      const int nwarps = (nthreads + 31) / 32;
      for (int b = 0; b < 16; ++b) {
        float s = 0.0f;
        for (int q = 0; q < nwarps; ++q) s += part[q][b];
        mass[b] = s;
      }
      int chosen = 0;
      float at = before, chosen_before = before;
      for (int b = 0; b < 16; ++b) {
        if (at < goal) { chosen = b; chosen_before = at; }
        at += mass[b];
      }
      before_s = chosen_before;
      prefix_s = prefix | (chosen << shift);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0) cut[row] = prefix_s;
"""

_KERNEL = KernelBuild(NAME, "tandem_top_p_cut", ["key", "weights", "target"], ["cut"],
                      _PASS_LOOP_CUDA, _METAL_SOURCE)


def reference(key: mx.array, weights: mx.array, target: mx.array) -> mx.array:
    """Plain-mx float32, the same radix select pass by pass (slow, obviously the
    contract): [B, 1] int32, the largest key t with sum(w[key < t]) < target."""
    rows = key.shape[0]
    prefix = mx.zeros((rows, 1), dtype=mx.int32)
    before = mx.zeros((rows, 1), dtype=mx.float32)
    for shift, mask in PASSES:
        high = shift + mask.bit_length()
        inside = (key >> high) == (prefix >> high) if high < 31 else mx.ones(key.shape, mx.bool_)
        digit = (key >> shift) & mask                                      # [B, V]
        bins = mx.stack([mx.sum(mx.where(inside & (digit == b), weights, 0.0), axis=-1)
                         for b in range(mask + 1)], axis=-1)               # [B, bins]
        at = before + mx.cumsum(bins, axis=-1, inclusive=False)            # mass before
        below = at < target                                                # [B, bins]
        chosen = mx.maximum(mx.sum(below, axis=-1, keepdims=True) - 1, 0)  # last below
        before = mx.where(mx.any(below, axis=-1, keepdims=True),
                          mx.take_along_axis(at, chosen, axis=-1), before)
        prefix = prefix | (chosen.astype(mx.int32) << shift)
    return prefix


def applies(key: mx.array, weights: mx.array, target: mx.array) -> bool:
    return (key.ndim == 2 and key.dtype == mx.int32 and weights.shape == key.shape
            and weights.dtype == mx.float32 and target.shape == (key.shape[0], 1)
            and target.dtype == mx.float32 and key.shape[1] < 2 ** 31)


def kernel(key: mx.array, weights: mx.array, target: mx.array, *, backend: str) -> mx.array:
    """Launch on `backend`: [B, 1] int32, as `reference`."""
    rows = key.shape[0]
    (cut,) = _KERNEL.get(backend)(
        inputs=[key, weights, target], grid=(rows * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1), output_shapes=[(rows, 1)], output_dtypes=[mx.int32])
    return cut
