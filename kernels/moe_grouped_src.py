"""CUDA source of kernels/moe_grouped.py (see there for the contract): the routed experts
of many (token, expert) pairs, grouped by expert. Launch 1: gate+up and SwiGLU, launch 2:
down, each pair's output scaled by its weight and written at its token-major row.

Both launches: a block is (expert e, a tile of its rows); it finds e's pairs in the sorted
ids (launch 1 by two warp-wide searches, which it writes for launch 2), holds its warps'
weight rows in registers and runs every pair of e through them, so each expert's bytes are
read once a launch whatever its pair count (MLX 0.32's CUDA gather_qmm runs a tiled GEMM a
pair, each reading its expert again).
"""

from kernels.moe_experts_src import _CUDA_HEADER as _PAIR_HEADER

# moe_experts' warp_sum and dot32, then this kernel's own helpers
CUDA_HEADER = _PAIR_HEADER + """
// sum over `lanes` consecutive lanes (a power of two up to 32)
__device__ __forceinline__ float lanes_sum(float v, int lanes) {
  for (int off = lanes / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// 32 consecutive values as floats. Scalar loads: 16-byte ones need an alignment a view's
// offset does not promise, and a checked pair of paths took 105 registers against 80
template <typename T>
__device__ __forceinline__ void load32(const T* p, float* out) {
#pragma unroll
  for (int k = 0; k < 32; ++k) out[k] = static_cast<float>(p[k]);
}

// The words pass through an empty asm each use, so the compiler re-extracts the nibbles
// per pair instead of hoisting all of a warp's dequantized weights out of the pair loop
// (256 floats a lane: 255 registers and spills, nvcc -arch=sm_90a)
__device__ __forceinline__ uint4 opaque(uint4 q) {
  asm volatile("" : "+r"(q.x), "+r"(q.y), "+r"(q.z), "+r"(q.w));
  return q;
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
"""

# x [N, D]; order [P] (pair index n * K + j, in expert order); eid [P] (ascending expert
# ids, the router's int32 or uint32); w [E, R, D/8] (gate rows [0, I), up rows [I, 2I));
# h [P, I] float32, sorted order;
# seg [E, 2] int32: each expert's pairs [s, t), for launch 2.
CUDA_GATE_UP = """
  constexpr int WPR = D / 8;                  // uint32 words per row
  constexpr int NCHUNK = D / 32;              // 32-weight chunks (one uint4) per row
  constexpr int NCH = (NCHUNK + 31) / 32;     // chunks per lane
  constexpr int G = D / GS;                   // groups per row
  constexpr int RPB = 8 * RPW;                // gate rows per block: 8 warps
  constexpr int BPE = I / RPB;                // blocks per expert
  const int P = order_shape[0];
  const int e = blockIdx.x / BPE;
  const int i0 = (blockIdx.x % BPE) * RPB + (threadIdx.x / 32) * RPW;
  const int lane = threadIdx.x % 32;
  const int s = warp_lower_bound(eid, P, e, lane);      // e's pairs: [s, t)
  const int t = warp_lower_bound(eid, P, e + 1, lane);
  if (blockIdx.x % BPE == 0 && threadIdx.x == 0) {      // for launch 2: no search there
    seg[2 * e] = s;
    seg[2 * e + 1] = t;
  }
  if (s == t) return;                         // the whole block: no barrier below
  uint4 qg[RPW][NCH], qu[RPW][NCH];
  float sg[RPW][NCH], bg[RPW][NCH], su[RPW][NCH], bu[RPW][NCH];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const size_t rg = size_t(e) * R + i0 + r;   // gate row; the up row is I further
    const size_t ru = rg + I;
#pragma unroll
    for (int it = 0; it < NCH; ++it) {
      const int c = it * 32 + lane;
      const int cc = c < NCHUNK ? c : 0;
      const int grp = cc * 32 / GS;
      qg[r][it] = reinterpret_cast<const uint4*>(w + rg * WPR)[cc];
      qu[r][it] = reinterpret_cast<const uint4*>(w + ru * WPR)[cc];
      sg[r][it] = static_cast<float>(scales[rg * G + grp]);
      bg[r][it] = static_cast<float>(biases[rg * G + grp]);
      su[r][it] = static_cast<float>(scales[ru * G + grp]);
      bu[r][it] = static_cast<float>(biases[ru * G + grp]);
    }
  }
  for (int p = s; p < t; ++p) {
    const int n = int(order[p]) / K;
    const auto* xr = x + size_t(n) * D;
    float ag[RPW], au[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) ag[r] = au[r] = 0.f;
#pragma unroll
    for (int it = 0; it < NCH; ++it) {        // one chunk of x at a time: few registers
      const int c = it * 32 + lane;
      if (c < NCHUNK) {
        float xv[32];
        load32(xr + c * 32, xv);
        float xs = 0.f;
#pragma unroll
        for (int k = 0; k < 32; ++k) xs += xv[k];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
          ag[r] += sg[r][it] * dot32(opaque(qg[r][it]), xv) + bg[r][it] * xs;
          au[r] += su[r][it] * dot32(opaque(qu[r][it]), xv) + bu[r][it] * xs;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const float g = warp_sum(ag[r]);
      const float u = warp_sum(au[r]);
      if (lane == 0) h[size_t(p) * I + i0 + r] = g / (1.f + __expf(-g)) * u;
    }
  }
"""

# h [P, I] float32 (sorted order); order as launch 1; seg launch 1's; scores [N * K] float32 (a
# pair's weight at its token-major index); w [E, D, I/8]; y [N * K, D] float32: row
# order[p] = scores[order[p]] * (down_e @ h[p]).
CUDA_DOWN = """
  constexpr int WPR = I / 8;                  // uint32 words per down row
  constexpr int CPR = I / 32;                 // chunks per down row
  constexpr int LPR = CPR < 32 ? CPR : 32;    // lanes a row
  constexpr int RPP = 32 / LPR;               // rows a warp reads at once
  constexpr int CPL = CPR / LPR;              // chunks a lane
  constexpr int G = I / GS;
  constexpr int RPB = 8 * RPW;                // rows per block: 8 warps
  constexpr int BPE = D / RPB;                // blocks per expert
  const int e = blockIdx.x / BPE;
  const int lane = threadIdx.x % 32;
  const int d0 = (blockIdx.x % BPE) * RPB + (threadIdx.x / 32) * RPW + lane / LPR;
  const int part = lane % LPR;
  const int s = seg[2 * e], t = seg[2 * e + 1];         // e's pairs, from launch 1
  if (s == t) return;
#pragma unroll
  for (int rr = 0; rr < RPW; rr += RPP) {
    const size_t row = size_t(e) * D + d0 + rr;
    uint4 q[CPL];
    float sc[CPL], bs[CPL];
#pragma unroll
    for (int it = 0; it < CPL; ++it) {
      const int c = it * LPR + part;
      q[it] = reinterpret_cast<const uint4*>(w + row * WPR)[c];
      sc[it] = static_cast<float>(scales[row * G + c * 32 / GS]);
      bs[it] = static_cast<float>(biases[row * G + c * 32 / GS]);
    }
    for (int p = s; p < t; ++p) {
      const float* hr = h + size_t(p) * I;
      float acc = 0.f;
#pragma unroll
      for (int it = 0; it < CPL; ++it) {
        const int c = it * LPR + part;
        float hv[32];
        load32(hr + c * 32, hv);
        float hsum = 0.f;
#pragma unroll
        for (int k = 0; k < 32; ++k) hsum += hv[k];
        acc += sc[it] * dot32(opaque(q[it]), hv) + bs[it] * hsum;
      }
      acc = lanes_sum(acc, LPR);
      if (part == 0) {
        const int pair = int(order[p]);
        y[size_t(pair) * D + d0 + rr] = scores[pair] * acc;
      }
    }
  }
"""
