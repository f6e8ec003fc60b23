"""Top-p's cut over a whole vocabulary without a sort: a radix select by mass, and the
last tie at the cut that top-p keeps.

The sampler (engine/core/sampler.py, `_top_p_keep`) ranks ids by key = the int32 bits
of -d >= 0 (d = scaled logit - row max <= 0; smaller key = likelier) and keeps those
likelier than the cut: the largest key t whose strictly-likelier mass
G(t) = sum(w[key < t]) is below target (= top_p x the row's total), and of the ids at t
(ties, all of one weight) the first in id order while the mass before each is below
target, as a stable sort would. Its plain path finds t by 31 halvings of the key range,
each a masked sum over the row (~190 launches and 31 passes over [B, V]: 1.0-2.2 ms on
the H200 at V = 248,320, session 11), and the ties by a running sum over the row. Here
8 passes of 4 bits (bits 30..27, ..., 6..3, then 2..0) find t: each pass sums the
weights of the ids inside the current prefix into 16 bins, and the cut's bin is the
last whose mass before it is below target, so the prefix gains 4 bits. Then the ties
are counted and the n-th found (`last_tie`).

CUDA: a pass a launch, each over blocks_per_row(V) blocks a row (61 at V = 248,320:
the whole GPU at B = 1); each launch's blocks first make the previous pass's decision
from its bins, all alike, then sum their own span; a launch decides the cut and counts
each block's ties, a last one finds the last tie kept (LAUNCHES in all). One block a row
did the cut in one launch, but left every SM but one idle at B = 1: 0.60 ms a step on
the H100 (session 32), 71 us this way (session 34). Metal: the cut in one threadgroup a
row, the last tie by plain ops.

Deterministic: fixed summation trees whose shape depends on V alone (a thread's ids in
order, warps by shuffles, warps and blocks in order): the same row gives the same cut in
any batch. Off the exact mass by at most depth(V) roundings of the total (the tests'
bound).

key [B, V] int32 (>= 0), weights [B, V] float32, target [B, 1] float32 -> [B, 2] int32:
the cut, and the index of the last id at the cut that top-p keeps.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild, scalar

NAME = "top_p_cut"
METAL_THREADS = 1024    # Metal: one threadgroup a row; 32 simdgroups
BINS = 16
PASSES = ((27, 15), (23, 15), (19, 15), (15, 15), (11, 15), (7, 15), (3, 15), (0, 7))

# CUDA: many blocks a row, one launch a pass (the Metal source below: one block a row).
THREADS = 256       # a CUDA block's threads
SPAN = 4096         # ids a CUDA block reads a pass: 16 a thread, four a load
GROUPS = 16         # the decision sums each bin's blocks in 16 groups, then the groups
LAUNCHES = len(PASSES) + 2      # a pass a launch, the last decision + ties, the last tie
MAX_BLOCKS = 1024   # CUDA blocks a row the last launch holds in shared memory (V <= 4M)


def blocks_per_row(vocab: int) -> int:
    """CUDA blocks a row: the vocabulary's alone, so a row's sums are the same in any batch."""
    return -(-vocab // SPAN)


def depth(vocab: int, backend: str = "cuda") -> int:
    """Roundings deep of any mass the kernel compares with target (Higham 4.2's bound:
    |error| <= depth x 2**-24 x the row's total, its weights being >= 0). CUDA: a
    thread's ids into a bin (16), warps by shuffles (5), a block's 8 warps, a group's
    blocks, the 16 groups; Metal: a thread's ids (V / 1,024), simdgroups (5), the 32
    simdgroups. Then the running mass before each bin (16 adds a pass, 8 passes) and
    the target's own rounding (1)."""
    if backend == "metal":
        sums = -(-vocab // METAL_THREADS) + 5 + METAL_THREADS // 32
    else:
        sums = 16 + 5 + THREADS // 32 + -(-blocks_per_row(vocab) // GROUPS) + GROUPS
    return sums + 16 * len(PASSES) + 1


# The decision of pass PREV (>= 0) from its bins over every block of the row (part_in
# [B, nb x 16]), as every block of the next pass makes it: the same sums in the same
# order, so the blocks agree. Sets prefix_s (the cut's bits so far) and before_s (the
# mass strictly likelier than the prefix's range); PREV < 0: the empty prefix.
_DECIDE_CUDA = """
  __shared__ float group_s[16][16];                // [group][bin]
  __shared__ float mass_s[16];
  __shared__ int prefix_s;
  __shared__ float before_s;
  if (tid == 0) { prefix_s = 0; before_s = 0.f; }
  if (PREV >= 0) {
    const float* pp = part_in + size_t(row) * nb * 16;
    {
      const int bin = tid % 16, g = tid / 16;      // 256 threads: 16 groups x 16 bins
      float s = 0.f;
      for (int q = g; q < nb; q += 16) s += pp[q * 16 + bin];
      group_s[g][bin] = s;
    }
    __syncthreads();
    if (tid < 16) {
      float s = 0.f;
      for (int g = 0; g < 16; ++g) s += group_s[g][tid];
      mass_s[tid] = s;
    }
    __syncthreads();
    if (tid == 0) {
      const int shifts[8] = {27, 23, 19, 15, 11, 7, 3, 0};
      int chosen = 0;                               // the last bin whose mass before it is < goal
      float at = before_in[row], chosen_before = at;
      for (int b = 0; b < 16; ++b) {
        if (at < goal) { chosen = b; chosen_before = at; }
        at += mass_s[b];
      }
      prefix_s = int(static_cast<unsigned>(prefix_in[row]) | (unsigned(chosen) << shifts[PREV]));
      before_s = chosen_before;
    }
  }
  __syncthreads();
"""

# One pass (pass_no[0] = 0..7): decide the previous pass, then sum this block's span of
# ids inside the new prefix into 16 bins by their next 4 bits (3 in the last pass).
# Block 0 of a row hands the prefix and its mass before to the next launch.
_PASS_CUDA = """
  const int V = key_shape[1];
  const int nb = (V + 4095) / 4096;                // blocks_per_row
  const int row = blockIdx.x / nb, blk = blockIdx.x % nb;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int pass = pass_no[0], PREV = pass - 1;
  const float goal = target[row];
""" + _DECIDE_CUDA + """
  if (blk == 0 && tid == 0) { prefix[row] = prefix_s; before[row] = before_s; }
  const int shifts[8] = {27, 23, 19, 15, 11, 7, 3, 0};
  const int shift = shifts[pass];
  const int high = shift + (pass == 7 ? 3 : 4);    // bits at or above: the prefix
  const unsigned pre = static_cast<unsigned>(prefix_s);
  const unsigned hmask = high >= 31 ? 0u : (0xffffffffu << high);
  const int* k = key + size_t(row) * V;
  const float* w = weights + size_t(row) * V;
  float bins[16];
#pragma unroll
  for (int b = 0; b < 16; ++b) bins[b] = 0.f;
#define TPC_ADD(KK, WI) { \\
    const int bin_ = int(((KK) >> shift) & 15u); \\
    _Pragma("unroll") for (int b = 0; b < 16; ++b) bins[b] += (b == bin_) ? (WI) : 0.f; }
  // Four ids a load where every row starts 16-byte aligned (V % 4 == 0 and the arrays
  // do): the arrays' choice, so a row takes the same path alone or in any batch.
  const bool by4 = V % 4 == 0 && reinterpret_cast<size_t>(key) % 16 == 0
                   && reinterpret_cast<size_t>(weights) % 16 == 0;
  if (by4) {
    const int V4 = V / 4;
    const int4* k4 = reinterpret_cast<const int4*>(k);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    int4 kv[4];
    float4 wv[4];
    unsigned in[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {                 // all four loads in flight
      const int i = blk * 1024 + u * 256 + tid;
      kv[u] = i < V4 ? k4[i] : int4{0, 0, 0, 0};
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {                 // each id inside the prefix: a bit of in[u]
      const int i = blk * 1024 + u * 256 + tid;
      in[u] = i >= V4 ? 0u
            : ((static_cast<unsigned>(kv[u].x) & hmask) == pre ? 1u : 0u)
            | ((static_cast<unsigned>(kv[u].y) & hmask) == pre ? 2u : 0u)
            | ((static_cast<unsigned>(kv[u].z) & hmask) == pre ? 4u : 0u)
            | ((static_cast<unsigned>(kv[u].w) & hmask) == pre ? 8u : 0u);
      wv[u] = in[u] ? w4[i] : float4{0.f, 0.f, 0.f, 0.f};
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (in[u] & 1u) TPC_ADD(static_cast<unsigned>(kv[u].x), wv[u].x)
      if (in[u] & 2u) TPC_ADD(static_cast<unsigned>(kv[u].y), wv[u].y)
      if (in[u] & 4u) TPC_ADD(static_cast<unsigned>(kv[u].z), wv[u].z)
      if (in[u] & 8u) TPC_ADD(static_cast<unsigned>(kv[u].w), wv[u].w)
    }
  } else {
    for (int j = 0; j < 16; ++j) {
      const int i = blk * 4096 + j * 256 + tid;
      if (i < V) {
        const unsigned kk = static_cast<unsigned>(k[i]);
        if ((kk & hmask) == pre) TPC_ADD(kk, w[i])
      }
    }
  }
#undef TPC_ADD
  __shared__ float warp_s[8][16];
#pragma unroll
  for (int b = 0; b < 16; ++b) {
    float s = bins[b];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) warp_s[warp][b] = s;
  }
  __syncthreads();
  if (tid < 16) {                                  // a bin a thread, the warps in order
    float s = 0.f;
    for (int q = 0; q < 8; ++q) s += warp_s[q][tid];
    part[(size_t(row) * nb + blk) * 16 + tid] = s;
  }
"""

# The last pass's decision (the cut, and the mass strictly likelier), made by every block
# of the row as the passes make theirs; then each block counts the ties at the cut (ids
# with key == cut, all of one weight) in its span, with that weight.
_TIES_CUDA = """
  const int V = key_shape[1];
  const int nb = (V + 4095) / 4096;                // blocks_per_row
  const int row = blockIdx.x / nb, blk = blockIdx.x % nb;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int PREV = 7;
  const float goal = target[row];
""" + _DECIDE_CUDA + """
  if (blk == 0 && tid == 0) { cut[row] = prefix_s; cut_before[row] = before_s; }
  const int c = prefix_s;
  const int* k = key + size_t(row) * V;
  float n = 0.f, wt = 0.f;                         // a thread's ties (exact: <= 16), their weight
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int i = blk * 4096 + j * 256 + tid;
    if (i < V && k[i] == c) { n += 1.f; wt = weights[size_t(row) * V + i]; }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    n += __shfl_xor_sync(0xffffffffu, n, off);
    wt = fmaxf(wt, __shfl_xor_sync(0xffffffffu, wt, off));
  }
  __shared__ float tn_s[8], tw_s[8];
  if (lane == 0) { tn_s[warp] = n; tw_s[warp] = wt; }
  __syncthreads();
  if (tid == 0) {
    float s = 0.f, m = 0.f;
    for (int q = 0; q < 8; ++q) { s += tn_s[q]; m = fmaxf(m, tw_s[q]); }
    ties[size_t(row) * nb + blk] = int(s);
    tie_w[size_t(row) * nb + blk] = m;
  }
"""

# The ties the cut keeps, in id order, as a stable sort by probability would: tie r
# (0-based) while before + r x w < goal, so the first n = ceil((goal - before) / w)
# (at least 1, at most all m). One block a row finds the n-th: the block of 4,096 ids
# holding it from the blocks' counts, then the thread of 16 ids, which walks them.
# out [B, 2]: the cut, and the index of the last tie kept (V - 1 where there is none).
_LAST_CUDA = """
  const int V = key_shape[1];
  const int nb = ties_shape[1];
  const int row = blockIdx.x, tid = threadIdx.x;
  const int c = cut[row];
  const int* k = key + size_t(row) * V;
  __shared__ int cnt_s[1024];                      // the blocks' tie counts, then the threads'
  __shared__ float w_s[1024];
  __shared__ int blk_s, need_s, owner_s, last_s;
  for (int q = tid; q < nb; q += 256) {
    cnt_s[q] = ties[size_t(row) * nb + q];
    w_s[q] = tie_w[size_t(row) * nb + q];
  }
  __syncthreads();
  if (tid == 0) {
    int m = 0;
    float wt = 0.f;
    for (int q = 0; q < nb; ++q) { m += cnt_s[q]; wt = fmaxf(wt, w_s[q]); }
    const float x = (target[row] - cut_before[row]) / wt;
    int n = m;                                     // ties kept: all, unless target falls among them
    if (wt > 0.f && x < float(m)) { const int up = int(ceilf(x)); n = up < 1 ? 1 : up; }
    blk_s = -1;
    last_s = V - 1;
    if (m > 0) {
      int q = 0;
      while (n > cnt_s[q]) { n -= cnt_s[q]; ++q; }   // n <= m: ends at a block with ties
      blk_s = q;
      need_s = n;
    }
  }
  __syncthreads();
  if (blk_s >= 0) {                                // the same in every thread
    const int a = blk_s * 4096 + 16 * tid;         // this thread's ids [a, a + 16), in order
    int cnt = 0;
    for (int j = 0; j < 16; ++j) cnt += a + j < V && k[a + j] == c ? 1 : 0;
    cnt_s[tid] = cnt;
    __syncthreads();
    if (tid == 0) {
      int need = need_s, t = 0;
      while (need > cnt_s[t]) { need -= cnt_s[t]; ++t; }   // the same ids as the block counted
      owner_s = t;
      need_s = need;
    }
    __syncthreads();
    if (tid == owner_s) {
      int need = need_s;
      for (int j = 0; j < 16; ++j)
        if (a + j < V && k[a + j] == c && --need == 0) { last_s = a + j; break; }
    }
  }
  __syncthreads();
  if (tid == 0) { out[2 * row] = c; out[2 * row + 1] = last_s; }
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

_METAL = KernelBuild(NAME, "tandem_top_p_cut", ["key", "weights", "target"], ["cut"],
                     "", _METAL_SOURCE)
_PASS = KernelBuild(NAME, "tandem_top_p_pass",
                    ["key", "weights", "target", "pass_no", "part_in", "prefix_in", "before_in"],
                    ["part", "prefix", "before"], _PASS_CUDA, "")
_TIES = KernelBuild(NAME, "tandem_top_p_ties",
                    ["key", "weights", "target", "part_in", "prefix_in", "before_in"],
                    ["cut", "cut_before", "ties", "tie_w"], _TIES_CUDA, "")
_LAST = KernelBuild(NAME, "tandem_top_p_last",
                    ["key", "target", "cut", "cut_before", "ties", "tie_w"], ["out"],
                    _LAST_CUDA, "")


def reference(key: mx.array, weights: mx.array, target: mx.array) -> mx.array:
    """Plain-mx float32, the same radix select pass by pass (slow, obviously the
    contract): [B, 2] int32, the largest key t with sum(w[key < t]) < target, and the
    index of the last tie at t the cut keeps (`last_tie`)."""
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
    return mx.concatenate([prefix, last_tie(key, weights, target, prefix, before)], axis=1)


def last_tie(key: mx.array, weights: mx.array, target: mx.array, cut: mx.array,
             before: mx.array) -> mx.array:
    """[B, 1] int32: the index of the last id at the cut's key that top-p keeps. Ties
    (key == cut, one weight w) are kept in id order, as a stable sort by probability
    would keep them, while the mass before each (before + r x w for the r-th) is below
    target: the first n = ceil((target - before) / w) of them, at least 1, at most all.
    V - 1 where the cut has no ids."""
    at = key == cut                                                    # [B, V]
    m = at.astype(mx.int32).sum(axis=-1, keepdims=True)                # [B, 1]
    w = mx.max(mx.where(at, weights, 0.0), axis=-1, keepdims=True)     # [B, 1]
    x = (target - before) / mx.maximum(w, 1e-38)
    n = mx.where((w > 0) & (x < m), mx.maximum(mx.ceil(mx.minimum(x, 2.0 ** 30)), 1), m)
    rank = mx.cumsum(at.astype(mx.int32), axis=-1)                     # [B, V] inclusive
    nth = mx.argmax(at & (rank == n.astype(mx.int32)), axis=-1, keepdims=True)
    return mx.where(m > 0, nth, key.shape[1] - 1).astype(mx.int32)


def applies(key: mx.array, weights: mx.array, target: mx.array) -> bool:
    return (key.ndim == 2 and key.dtype == mx.int32 and weights.shape == key.shape
            and weights.dtype == mx.float32 and target.shape == (key.shape[0], 1)
            and target.dtype == mx.float32
            and 0 < key.shape[1] <= MAX_BLOCKS * SPAN)


def kernel(key: mx.array, weights: mx.array, target: mx.array, *, backend: str) -> mx.array:
    """Launch on `backend`: [B, 2] int32, as `reference`. CUDA: LAUNCHES launches of
    blocks_per_row(V) blocks a row (the stand-in counts as many). Metal: the cut in one
    threadgroup a row, the last tie by `last_tie`'s plain ops (not ported to Metal)."""
    rows = key.shape[0]
    if backend == "metal":
        (cut,) = _METAL.get(backend)(
            inputs=[key, weights, target], grid=(rows * METAL_THREADS, 1, 1),
            threadgroup=(METAL_THREADS, 1, 1), output_shapes=[(rows, 1)],
            output_dtypes=[mx.int32])
        before = _blocked_sum(mx.where(key < cut, weights, 0.0))
        return mx.concatenate([cut, last_tie(key, weights, target, cut, before)], axis=1)
    nb = blocks_per_row(key.shape[1])
    # pass 0 decides nothing: its inputs from a pass before are placeholders of their
    # dtypes (never read), so all 8 passes are one compiled kernel
    part, prefix, before = weights, key, target
    for p in range(len(PASSES)):
        part, prefix, before = _PASS.get(backend)(
            inputs=[key, weights, target, scalar(p, mx.int32), part, prefix, before],
            grid=(rows * nb * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
            output_shapes=[(rows, nb * 16), (rows, 1), (rows, 1)],
            output_dtypes=[mx.float32, mx.int32, mx.float32])
    cut, cut_before, ties, tie_w = _TIES.get(backend)(
        inputs=[key, weights, target, part, prefix, before],
        grid=(rows * nb * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
        output_shapes=[(rows, 1), (rows, 1), (rows, nb), (rows, nb)],
        output_dtypes=[mx.int32, mx.float32, mx.int32, mx.float32])
    (out,) = _LAST.get(backend)(
        inputs=[key, target, cut, cut_before, ties, tie_w], grid=(rows * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1), output_shapes=[(rows, 2)], output_dtypes=[mx.int32])
    return out


def _blocked_sum(x: mx.array) -> mx.array:
    """[B, 1] row sums in two levels (blocks of 256, then the blocks): ~1e-7 relative
    where one accumulator down 248k ids drifts far more (engine/core/sampler._row_sum)."""
    rows, cols = x.shape
    pad = -cols % 256
    blocks = (mx.pad(x, [(0, 0), (0, pad)]) if pad else x).reshape(rows, -1, 256).sum(axis=-1)
    return blocks.sum(axis=-1, keepdims=True)
