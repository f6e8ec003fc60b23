"""A sampling row's draw by inverse CDF in one launch, without a running sum over the row.

The sampler (engine/core/sampler.py, `_draw`) picks the id whose slice of the running
sum of the kept weights holds t = u x total (u uniform in [0, 1), one a row). Its plain
path writes that running sum ([B, V], MLX's scan: one block a row, ~118 us at
V = 248,320 on the H100, session 32) and then counts the entries <= t (a second pass).
Here one block a row finds the id by levels: the row's range is cut into 32 contiguous
pieces (a warp's each), each summed; the piece whose slice holds t is kept and t made
relative to it; again, until at most WALK ids remain, which one thread walks in order.
The row is read once at the first level and a 32nd of it after (V = 248,320: pieces of
7,760, 244 and 8 ids, then a walk of at most 8).

Never a dropped id: a piece is chosen only with a positive sum (a sum of weights >= 0 is
positive iff one of them is), an id only with a positive weight, and where rounding
leaves t past the last such piece or id, that last one is taken.

Deterministic: fixed summation trees (a lane's float4s in order, warps by shuffles),
the same row gives the same id in any batch. Against the exact running sum, each value
compared is a float32 sum at most `depth(V)` roundings deep (`depth` below):
the id's slice holds t within depth(V) x 2**-24 of the row's total (the tests' bound).

kept [B, V] float32 (>= 0; 0 = dropped), u [B, 1] float32 in [0, 1) -> [B] int32.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild

NAME = "cdf_draw"
THREADS = 1024      # one block a row; 32 warps, 32 pieces a level
WALK = 64           # at most this many ids: one thread walks them in order
_BELOW_ONE = 1.0 - 2.0 ** -23   # t stays below the total it is taken of (exact in float32)


def depth(vocab: int) -> int:
    """Roundings deep of any sum the kernel compares, from the row's ids up (Higham 4.2's
    bound: |error| <= depth x 2**-24 x the sum's magnitude). Each level: a lane adds its
    ids in order (a float4's four pairwise, 2, then one a float4: fewer than the ids one
    by one, ceil(piece / 32), counted here), warps by shuffles (5), the pieces before
    t's in order (32), and t itself (u x total, or less its piece's start: 1); then the
    walk's at most WALK adds."""
    span, total = vocab, 0
    while span > WALK:
        piece = (-(-span // 32) + 3) // 4 * 4
        total += 2 + -(-piece // 32) + 5 + 32 + 1
        span = piece
    return total + WALK + 1


_CUDA_SOURCE = """
  const int V = kept_shape[1];
  const int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int nwarps = int(blockDim.x) / 32;
  constexpr int UNROLL = 4;                       // float4 loads in flight a lane
  constexpr int WALK = 64;
  const float below_one = 1.0f - 1.0f / 8388608.0f;
  const float* w = kept + size_t(row) * V;
  // Four ids a load where every row starts 16-byte aligned (V % 4 == 0 and the array
  // does): the array's choice, so a row takes the same path alone or in any batch.
  const bool by4 = V % 4 == 0 && reinterpret_cast<size_t>(kept) % 16 == 0;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  __shared__ float sums[32];
  __shared__ int lo_s, hi_s;
  __shared__ float t_s;
  if (tid == 0) { lo_s = 0; hi_s = V; t_s = -1.f; }
  __syncthreads();
  while (hi_s - lo_s > WALK) {
    const int lo = lo_s, hi = hi_s;
    // pieces of a multiple of 4 ids, so each starts aligned where the row does
    const int piece = ((hi - lo + nwarps - 1) / nwarps + 3) / 4 * 4;
    const int a = min(lo + warp * piece, hi), b = min(a + piece, hi);
    float s = 0.f;
    int tail = a;
    if (by4) {
      const int a4 = a / 4, n4 = (b - a) / 4;
      for (int i = lane; i < n4; i += 32 * UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int j = 0; j < UNROLL; ++j)
          v[j] = i + 32 * j < n4 ? w4[a4 + i + 32 * j] : float4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
      }
      tail = a + 4 * n4;
    }
    for (int i = tail + lane; i < b; i += 32) s += w[i];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) sums[warp] = s;
    __syncthreads();
    if (tid == 0) {
      float t = t_s;
      if (t < 0.f) {                              // the first level: t from the total
        float total = 0.f;
        for (int q = 0; q < nwarps; ++q) total += sums[q];
        t = fminf(u[row] * total, total * below_one);
      }
      int chosen = -1, last = -1;                 // the first positive piece holding t
      float acc = 0.f, t_in = 0.f;
      for (int q = 0; q < nwarps; ++q) {
        if (sums[q] > 0.f) {
          if (chosen < 0 && t < acc + sums[q]) { chosen = q; t_in = t - acc; }
          last = q;
        }
        acc += sums[q];
      }
      if (chosen < 0) { chosen = last < 0 ? 0 : last; t_in = last < 0 ? 0.f : sums[chosen]; }
      lo_s = min(lo + chosen * piece, hi);
      hi_s = min(lo_s + piece, hi);
      t_s = fminf(t_in, sums[chosen] * below_one);
    }
    __syncthreads();
  }
  if (tid == 0) {
    const int lo = lo_s, hi = hi_s;
    float t = t_s;
    if (t < 0.f) {                                // a row of at most WALK ids
      float total = 0.f;
      for (int i = lo; i < hi; ++i) total += w[i];
      t = fminf(u[row] * total, total * below_one);
    }
    int id = -1, last = -1;
    float acc = 0.f;
    for (int i = lo; i < hi; ++i) {
      const float wi = w[i];
      if (wi > 0.f) {
        if (id < 0 && t < acc + wi) id = i;
        last = i;
      }
      acc += wi;
    }
    out[row] = id >= 0 ? id : (last >= 0 ? last : lo);
  }
"""

_METAL_SOURCE = """
  const int V = kept_shape[1];
  const int row = int(threadgroup_position_in_grid.x);
  const int tid = int(thread_position_in_threadgroup.x);
  const int lane = int(thread_index_in_simdgroup), warp = tid / 32;   // 32-wide simdgroups
  const int nwarps = int(threads_per_threadgroup.x) / 32;
  constexpr int WALK = 64;
  const float below_one = 1.0f - 1.0f / 8388608.0f;
  device const float* w = kept + size_t(row) * V;
  threadgroup float sums[32];
  threadgroup int lo_s, hi_s;
  threadgroup float t_s;
  if (tid == 0) { lo_s = 0; hi_s = V; t_s = -1.0f; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  while (hi_s - lo_s > WALK) {
    const int lo = lo_s, hi = hi_s;
    const int piece = ((hi - lo + nwarps - 1) / nwarps + 3) / 4 * 4;
    const int a = min(lo + warp * piece, hi), b = min(a + piece, hi);
    float s = 0.0f;
    for (int i = a + lane; i < b; i += 32) s += w[i];
    for (int off = 16; off > 0; off >>= 1) s += simd_shuffle_xor(s, ushort(off));
    if (lane == 0) sums[warp] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
      float t = t_s;
      if (t < 0.0f) {
        float total = 0.0f;
        for (int q = 0; q < nwarps; ++q) total += sums[q];
        t = min(u[row] * total, total * below_one);
      }
      int chosen = -1, last = -1;
      float acc = 0.0f, t_in = 0.0f;
      for (int q = 0; q < nwarps; ++q) {
        if (sums[q] > 0.0f) {
          if (chosen < 0 && t < acc + sums[q]) { chosen = q; t_in = t - acc; }
          last = q;
        }
        acc += sums[q];
      }
      if (chosen < 0) { chosen = last < 0 ? 0 : last; t_in = last < 0 ? 0.0f : sums[chosen]; }
      lo_s = min(lo + chosen * piece, hi);
      hi_s = min(lo_s + piece, hi);
      t_s = min(t_in, sums[chosen] * below_one);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0) {
    const int lo = lo_s, hi = hi_s;
    float t = t_s;
    if (t < 0.0f) {
      float total = 0.0f;
      for (int i = lo; i < hi; ++i) total += w[i];
      t = min(u[row] * total, total * below_one);
    }
    int id = -1, last = -1;
    float acc = 0.0f;
    for (int i = lo; i < hi; ++i) {
      const float wi = w[i];
      if (wi > 0.0f) {
        if (id < 0 && t < acc + wi) id = i;
        last = i;
      }
      acc += wi;
    }
    out[row] = id >= 0 ? id : (last >= 0 ? last : lo);
  }
"""

_KERNEL = KernelBuild(NAME, "tandem_cdf_draw", ["kept", "u"], ["out"], _CUDA_SOURCE,
                      _METAL_SOURCE)


def reference(kept: mx.array, u: mx.array) -> mx.array:
    """Plain-mx float32, the sampler's plain draw: the first id whose running sum passes
    t = min(u x total, total x (1 - 2**-23)). [B] int32."""
    running = mx.cumsum(kept, axis=-1)                                 # [B, V]
    total = running[:, -1:]
    t = mx.minimum(u * total, total * _BELOW_ONE)
    return mx.sum(running <= t, axis=-1).astype(mx.int32)


def applies(kept: mx.array, u: mx.array) -> bool:
    return (kept.ndim == 2 and kept.dtype == mx.float32 and u.shape == (kept.shape[0], 1)
            and u.dtype == mx.float32 and 0 < kept.shape[1] < 2 ** 31)


def kernel(kept: mx.array, u: mx.array, *, backend: str) -> mx.array:
    """Launch on `backend`: [B] int32, the id whose slice of the running sum holds t."""
    rows = kept.shape[0]
    (ids,) = _KERNEL.get(backend)(
        inputs=[kept, u], grid=(rows * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
        output_shapes=[(rows,)], output_dtypes=[mx.int32])
    return ids
