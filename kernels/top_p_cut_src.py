"""kernels/top_p_cut.py's sources: CUDA's passes, ties and last tie, and Metal's one
threadgroup a row. The CUDA sources hard-code top_p_cut's THREADS (256), SPAN (4,096 ids
a block) and GROUPS (16); kernels/bench/cuda_on_cpu_top_p.py runs them on the CPU."""

# The decision of pass PREV (>= 0) from its bins over every block of the row (part_in
# [B, nb x 16]), as every block of the next pass makes it: the same sums in the same
# order, so the blocks agree. Sets prefix_s (the cut's bits so far) and before_s (the
# mass strictly likelier than the prefix's range); PREV < 0: the empty prefix.
DECIDE_CUDA = """
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
PASS_CUDA = """
  const int V = key_shape[1];
  const int nb = (V + 4095) / 4096;                // blocks_per_row
  const int row = blockIdx.x / nb, blk = blockIdx.x % nb;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int pass = pass_no[0], PREV = pass - 1;
  const float goal = target[row];
""" + DECIDE_CUDA + """
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
TIES_CUDA = """
  const int V = key_shape[1];
  const int nb = (V + 4095) / 4096;                // blocks_per_row
  const int row = blockIdx.x / nb, blk = blockIdx.x % nb;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int PREV = 7;
  const float goal = target[row];
""" + DECIDE_CUDA + """
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
LAST_CUDA = """
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

METAL_SOURCE = """
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
  if (tid == 0) { cut[row] = prefix_s; cut_before[row] = before_s; }   // before: last_tie's
"""
