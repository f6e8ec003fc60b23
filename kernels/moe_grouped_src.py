"""CUDA source of kernels/moe_grouped.py (see there for the contract): the routed experts
of many (token, expert) pairs, grouped by expert. Launch 1: gate+up and SwiGLU, launch 2:
down, each pair's output scaled by its weight and written at its token-major row.

Both launches: a block is (expert e, a tile of its weight rows); launch 1 finds e's pairs
in the sorted ids by two warp-wide searches and writes them for launch 2. The block takes
e's pairs 8 * NT at a time (a pass; one pass up to 16 pairs, an expert's usual count up to
~2,000 pairs a chunk): it stages the pass's token rows (x, or h) in shared memory in the
tensor cores' fragment order, K-chunk by K-chunk, and each warp runs its weight rows
through warp-level MMAs (`mma.sync.aligned.m16n8k8` .tf32, float32 sums): the weights
are A (16 rows x 8 of K), the pass's tokens B (8 of K x 8 tokens), so a pass of <= 8 pairs
costs one MMA per 16 x 8 weights. Each weight is unpacked once a pass, by the one lane the
fragment gives it to, straight from its packed word into a register (no shared-memory
round trip: no other lane or warp uses it).

Precision: a weight goes in as its integer nibble q (0..15, exact in tf32) and each
quantization group's scale and bias are applied after its MMAs, in float32:
sum_k x w = s * sum_k x q + b * sum_k x. bf16 or fp16 x is exact in tf32 (8 or 11
significant bits of tf32's 11), so the products are exact and only float32 sums round;
float32 operands (x in float32, h always) go in as two tf32 parts, hi + lo, within 2**-22
of the value (two MMAs). So the result is float32 math, as the old kernel's: no weight is
rounded to tf32 or bf16.

The MMA is one `__device__` function, `mma_tf32`; kernels/bench/cuda_shim.py's shim
defines TANDEM_SHIM and its own `mma_tf32`, written from the PTX ISA's fragment tables,
so the body as written runs on the CPU (kernels/bench/cuda_on_cpu_grouped.py).
"""

from kernels.moe_experts_src import _CUDA_HEADER as _PAIR_HEADER

# moe_experts' warp_sum (and dot32), then this kernel's own helpers
CUDA_HEADER = _PAIR_HEADER + r"""
// D (16 x 8, float32) += A (16 x 8, tf32) B (8 x 8, tf32) for one warp: PTX
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32. Lane l = 4 g + t (g = l / 4, the
// fragment's groupID; t = l % 4) holds A (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4) in
// a[0..3], B (t, g), (t + 4, g) in b[0..1], D (g, 2t), (g, 2t + 1), (g + 8, 2t),
// (g + 8, 2t + 1) in d[0..3] (the PTX ISA's fragment layouts for .m16n8k8 .tf32).
#ifndef TANDEM_SHIM
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// Weight j (bits 4j..4j+3) of a packed word as the float q = 0..15 itself (moe_experts'
// `nibble`: a mask and one exact fma), a tf32 value (4 significant bits).
__device__ __forceinline__ unsigned nibble_tf32(unsigned w, int j) {
  return __float_as_uint(nibble(w, j));
}

// A float32 value as two tf32 values (low 13 bits zero), each rounded to nearest (ties away
// from zero, by the bits): v = hi + lo + e with |e| <= 2^-22 |v|. For float32 operands.
__device__ __forceinline__ void split_tf32(float v, unsigned& hi, unsigned& lo) {
  hi = (__float_as_uint(v) + 0x1000u) & 0xFFFFE000u;
  lo = (__float_as_uint(v - __uint_as_float(hi)) + 0x1000u) & 0xFFFFE000u;
}

// The first index i in [0, P) with eid[i] >= key (P if none; eid ascending), found by the
// 32 lanes of a warp together: each round they probe 32 evenly spaced ids and keep the
// bucket the key falls in (3 rounds of one load for P up to 32K, where one lane's binary
// search is ~15 dependent loads before a block can start on its weights)
template <typename Id>
__device__ __forceinline__ int warp_lower_bound(const Id* eid, int P, int key, int lane) {
  int lo = 0, hi = P;
  while (lo < hi) {
    const int step = (hi - lo + 31) / 32;
    const int q = lo + lane * step;
    const bool less = q < hi && int(eid[q]) < key;
    const int c = int(warp_sum(less ? 1.f : 0.f));  // the probes below key: lanes 0..c-1
    const int up = lo + c * step;
    const int next_lo = c == 0 ? lo : lo + (c - 1) * step + 1;
    hi = up < hi ? up : hi;
    lo = next_lo;
  }
  return lo;
}

// The K order the MMAs take (a sum over K does not depend on it). A step is KS = 32 WL
// values of K (one quantization group or part of one; WL = 2 for groups of 64 and 128, 1
// for 32): lane t of a fragment row holds the step's packed words t WL .. t WL + WL - 1 of
// that weight row, and MMA m (0 .. 4 WL - 1) of the step takes from them, as K slots t and
// t + 4, nibble m of word 0 and nibble m of word 1 (WL = 2), or nibbles m and m + 4 of its
// one word (WL = 1). The token values are staged in the same order: the float index of
// token `tok`, value kk of a K-chunk of KC in the pass's buffer. Within an MMA's 32 lanes
// the lane is XORed by 4 m / WL, so that 32 consecutive kk of a token, as the block's
// threads store them, land in 32 different banks; the reader's 32 lanes stay a permutation.
template <int KC, int WL>
__device__ __forceinline__ int frag_index(int tok, int kk) {
  constexpr int KS = 32 * WL;
  const int st = kk / KS, r = kk % KS, word = r / 8, j = r % 8;
  const int t = word / WL, wi = word % WL;
  const int m = WL == 2 ? j : (j & 3);
  const int half = WL == 2 ? wi : (j >> 2);
  const int lane = (4 * (tok % 8) + t) ^ (4 * m / WL);
  return (((tok / 8) * (KC / 8) + st * 4 * WL + m) * 32 + lane) * 2 + half;
}

// The block stages values k0 .. k0 + KC - 1 of rows[0 .. 8 ntiles) of src (row stride
// `stride`; a row -1: zeros) in fragment order. Consecutive threads read consecutive
// values of a row (any alignment: scalar loads) and store into different banks; a thread
// issues 8 loads before its first store, so their latencies overlap.
template <int KC, int WL, typename T>
__device__ __forceinline__ void stage_tokens(float* buf, const T* src, const int* rows,
                                             int stride, int k0, int ntiles) {
  constexpr int U = 8;
  const int total = ntiles * 8 * KC;
  for (int base = threadIdx.x; base < total; base += U * blockDim.x) {
    float v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * blockDim.x;
      const int r = i < total ? rows[i / KC] : -1;
      v[u] = r >= 0 ? static_cast<float>(src[size_t(r) * stride + k0 + i % KC]) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * blockDim.x;
      if (i < total) buf[frag_index<KC, WL>(i / KC, i % KC)] = v[u];
    }
  }
}

// A step's packed weights for one lane: its WL words of each of its 2 NMT rows (tile m's
// rows row[m] and row[m] + 8) from value kb of K.
template <int NMT, int WL>
struct StepWords {
  unsigned q[NMT][2][WL];
  __device__ __forceinline__ void load(const uint32_t* w, const size_t (&row)[NMT], int wpr,
                                       int kb, int t) {
#pragma unroll
    for (int m = 0; m < NMT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t* src = w + (row[m] + 8 * h) * wpr + kb / 8 + t * WL;
        if constexpr (WL == 2) {
          const uint2 v = *reinterpret_cast<const uint2*>(src);
          q[m][h][0] = v.x;
          q[m][h][WL - 1] = v.y;
        } else {
          q[m][h][0] = src[0];
        }
      }
  }
};

// One K-chunk (KC values from k0, of KT) of a pass for one warp: NMT fragment row tiles
// of 16 weight rows (tile m's rows row[m] and row[m] + 8 for this lane, row[m] counting
// from the weights' first row: the lane's own g), against the staged tokens (ntiles tiles
// of 8). acc[m][n][0..3]: D's registers (rows g, g + 8; tokens 2t, 2t + 1 of tile n).
// cur: the chunk's first step's words on entry (loaded by the caller or the previous
// chunk); each step loads the next one's (the next chunk's first at the chunk's end, so
// that those loads fly during the block's staging) before its own MMAs, and its scales
// and biases, needed only after them.
// Per step: 4 WL MMAs a tile pair into `part` (sum x q over the step), then the fold
// acc += s * part + b * (sum x over the step), the token sums taken from the fragments
// the lane read (each lane has 1/4 of token g's values: two xor shuffles, then tokens 2t
// and 2t + 1 fetched from their quads).
template <int NMT, int NT, int KC, int KT, int WL, int GS, bool SPLIT, typename SP>
__device__ __forceinline__ void chunk_mma(float (&acc)[NMT][NT][4], const float2* buf,
                                          StepWords<NMT, WL>& cur, const uint32_t* w,
                                          SP scales, SP biases, const size_t (&row)[NMT],
                                          int wpr, int gpr, int k0, int ntiles, int lane) {
  constexpr int KS = 32 * WL;
  constexpr int MPS = 4 * WL;                   // MMAs (of 8 values of K) a step
  const int t = lane % 4;
  for (int st = 0; st < KC / KS; ++st) {
    const int kb = k0 + st * KS;
    const StepWords<NMT, WL> now = cur;
    if (kb + KS < KT) cur.load(w, row, wpr, kb + KS, t);
    const auto& q = now.q;
    float sc[NMT][2], bs[NMT][2];
#pragma unroll
    for (int m = 0; m < NMT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const size_t r = (row[m] + 8 * h) * gpr + kb / GS;
        sc[m][h] = static_cast<float>(scales[r]);
        bs[m][h] = static_cast<float>(biases[r]);
      }
    float part[NMT][NT][4];
    float xsum[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      xsum[n] = 0.f;
#pragma unroll
      for (int m = 0; m < NMT; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) part[m][n][i] = 0.f;
    }
#pragma unroll
    for (int mm = 0; mm < MPS; ++mm) {
      const int ja = mm, jb = WL == 2 ? mm : mm + 4;
      unsigned a[NMT][4];
#pragma unroll
      for (int m = 0; m < NMT; ++m) {
        a[m][0] = nibble_tf32(q[m][0][0], ja);
        a[m][1] = nibble_tf32(q[m][1][0], ja);
        a[m][2] = nibble_tf32(q[m][0][WL - 1], jb);
        a[m][3] = nibble_tf32(q[m][1][WL - 1], jb);
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if (n < ntiles) {                       // the same for every lane of the warp
          const float2 v = buf[(n * (KC / 8) + st * MPS + mm) * 32 + (lane ^ (4 * mm / WL))];
          xsum[n] += v.x + v.y;
          if constexpr (SPLIT) {
            unsigned hi[2], lo[2];
            split_tf32(v.x, hi[0], lo[0]);
            split_tf32(v.y, hi[1], lo[1]);
#pragma unroll
            for (int m = 0; m < NMT; ++m) {
              mma_tf32(part[m][n], a[m], hi);
              mma_tf32(part[m][n], a[m], lo);
            }
          } else {                              // bf16 / fp16 values: exact in tf32
            const unsigned b[2] = {__float_as_uint(v.x), __float_as_uint(v.y)};
#pragma unroll
            for (int m = 0; m < NMT; ++m) mma_tf32(part[m][n], a[m], b);
          }
        }
      }
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      if (n < ntiles) {
        float v = xsum[n];                      // token g's sum over the step, lanes 4g..4g+3
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        const float x0 = __shfl_sync(0xffffffffu, v, 8 * t);       // token 2t
        const float x1 = __shfl_sync(0xffffffffu, v, 8 * t + 4);   // token 2t + 1
#pragma unroll
        for (int m = 0; m < NMT; ++m)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[m][n][i] = fmaf(sc[m][i / 2], part[m][n][i],
                                fmaf(bs[m][i / 2], i % 2 ? x1 : x0, acc[m][n][i]));
      }
    }
  }
}
"""

# x [N, D]; order [P] (pair index n * K + j, in expert order); eid [P] (ascending expert
# ids, the router's int32 or uint32); w [E, R, D/8] (gate rows [0, I), up rows [I, 2I));
# h [P, I] float32, sorted order; seg [E, 2] int32: each expert's pairs [s, t), for launch 2.
# Template: NT token tiles of 8 a pass, KC values of D a staged chunk, WPB warps a block,
# each 16 gate rows and their 16 up rows (two fragment row tiles).
CUDA_GATE_UP = """
  constexpr int WL = GS % 64 == 0 ? 2 : 1;    // packed words a lane takes a step
  constexpr int BPE = I / (16 * WPB);         // blocks per expert
  constexpr bool SPLIT = sizeof(x[0]) == 4;   // float32 x: hi + lo tf32 parts
  __shared__ float2 buf[NT * (KC / 8) * 32];  // the pass's tokens, one K-chunk, fragment order
  __shared__ int rows[8 * NT];                // their rows of x (-1: past the expert's pairs)
  const int P = order_shape[0];
  const int e = blockIdx.x / BPE;
  const int lane = threadIdx.x % 32;
  const int i0 = (blockIdx.x % BPE) * 16 * WPB + (threadIdx.x / 32) * 16;
  const int s = warp_lower_bound(eid, P, e, lane);      // e's pairs: [s, t)
  const int t = warp_lower_bound(eid, P, e + 1, lane);
  if (blockIdx.x % BPE == 0 && threadIdx.x == 0) {      // for launch 2: no search there
    seg[2 * e] = s;
    seg[2 * e + 1] = t;
  }
  if (s == t) return;                         // the whole block: no barrier below
  const size_t rg = size_t(e) * R + i0 + lane / 4;      // the lane's gate row g
  const size_t row[2] = {rg, rg + I};                   // and its up row
  for (int p0 = s; p0 < t; p0 += 8 * NT) {
    const int cnt = t - p0 < 8 * NT ? t - p0 : 8 * NT;
    const int ntiles = (cnt + 7) / 8;
    const int tid = threadIdx.x;
    if (tid < 8 * NT)                         // no reader left: the last chunk's barriers
      rows[tid] = tid < cnt ? int(order[p0 + tid]) / K : -1;
    float acc[2][NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[0][n][i] = acc[1][n][i] = 0.f;
    StepWords<2, WL> cur;
    cur.load(w, row, D / 8, 0, lane % 4);
    for (int k0 = 0; k0 < D; k0 += KC) {
      __syncthreads();                        // rows written; the last chunk's MMAs done
      stage_tokens<KC, WL>(reinterpret_cast<float*>(buf), x, rows, D, k0, ntiles);
      __syncthreads();
      chunk_mma<2, NT, KC, D, WL, GS, SPLIT>(acc, buf, cur, w, scales, biases, row, D / 8,
                                             D / GS, k0, ntiles, lane);
    }
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * n + 2 * (lane % 4) + i % 2;
        if (tok < cnt) {
          const float g = acc[0][n][i], u = acc[1][n][i];
          h[size_t(p0 + tok) * I + i0 + lane / 4 + 8 * (i / 2)] = g / (1.f + __expf(-g)) * u;
        }
      }
  }
"""

# h [P, I] float32 (sorted order); order as launch 1; seg launch 1's; scores [N * K] float32 (a
# pair's weight at its token-major index); w [E, D, I/8]; y [N * K, D] float32: row
# order[p] = scores[order[p]] * (down_e @ h[p]).
# Template: NT, KC (of I), WPB as launch 1; MT fragment row tiles (16 down rows) a warp.
CUDA_DOWN = """
  constexpr int WL = GS % 64 == 0 ? 2 : 1;
  constexpr int BPE = D / (16 * MT * WPB);    // blocks per expert
  __shared__ float2 buf[NT * (KC / 8) * 32];
  __shared__ int rows[8 * NT];                // the pass's rows of h (-1: none)
  const int e = blockIdx.x / BPE;
  const int lane = threadIdx.x % 32;
  const int s = seg[2 * e], t = seg[2 * e + 1];         // e's pairs, from launch 1
  if (s == t) return;
  const int d0 = (blockIdx.x % BPE) * 16 * MT * WPB + (threadIdx.x / 32) * 16 * MT;
  size_t row[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) row[m] = size_t(e) * D + d0 + 16 * m + lane / 4;
  for (int p0 = s; p0 < t; p0 += 8 * NT) {
    const int cnt = t - p0 < 8 * NT ? t - p0 : 8 * NT;
    const int ntiles = (cnt + 7) / 8;
    const int tid = threadIdx.x;
    if (tid < 8 * NT) rows[tid] = tid < cnt ? p0 + tid : -1;
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.f;
    StepWords<MT, WL> cur;
    cur.load(w, row, I / 8, 0, lane % 4);
    for (int k0 = 0; k0 < I; k0 += KC) {
      __syncthreads();
      stage_tokens<KC, WL>(reinterpret_cast<float*>(buf), h, rows, I, k0, ntiles);
      __syncthreads();
      chunk_mma<MT, NT, KC, I, WL, GS, true>(acc, buf, cur, w, scales, biases, row, I / 8,
                                             I / GS, k0, ntiles, lane);
    }
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * n + 2 * (lane % 4) + i % 2;
        if (tok < cnt) {
          const int pair = int(order[p0 + tok]);
          const float sw = scores[pair];
#pragma unroll
          for (int m = 0; m < MT; ++m)
            y[size_t(pair) * D + d0 + 16 * m + lane / 4 + 8 * (i / 2)] = sw * acc[m][n][i];
        }
      }
  }
"""
