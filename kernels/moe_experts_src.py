"""CUDA sources of the MoE experts kernels (see moe_experts.py for the contract), and
both backends' sources filled in: launch 1 gate+up+SwiGLU, launch 2 down, the weighted
sum, the shared expert and the residual (the Metal templates:
kernels/moe_experts_metal_src.py). Kept apart so each file stays readable.

The bodies are templates (``string.Template``: ``$name`` hooks; the C++ has no ``$``):
where a token's expert ids and weights come from, and how x is read. `IDX_HOOKS` makes
moe_experts.py's kernels (idx and scores are inputs); kernels/moe_block_src.py's hooks
make the variant that routes inside (the router logits are the input).
"""
from string import Template

from kernels.moe_experts_metal_src import METAL_DOWN, METAL_GATE_UP, METAL_HEADER

_CUDA_HEADER = """
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Weight j (bits 4j..4j+3) of a packed word as the float q = 0..15 itself: the nibble put
// into the mantissa under 2^23's exponent reads 2^23 + q 16^(j % 4) (the word's upper half
// shifted down first for j >= 4), and one exact fma takes that back to q. Once j is a
// constant that is a mask and an fma a weight, where float(q) was a shift, a mask and an
// int-to-float conversion (H100 SASS: I2FP, one a weight); the value is the same float.
__device__ __forceinline__ float nibble(unsigned w, int j) {
  const int s = 4 * (j & 3);
  const unsigned v = j < 4 ? w : w >> 16;
#ifdef TANDEM_SHIM
  const unsigned bits = (v & (0xFu << s)) | 0x4B000000u;
#else
  // (v & mask) | 2^23's exponent as one LOP3: written in C, both constants are immediates
  // and ptxas makes it two
  unsigned bits;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(bits) : "r"(v), "r"(0xFu << s), "r"(0x4B000000u));
#endif
  return fmaf(__uint_as_float(bits), 1.f / float(1 << s), -8388608.f / float(1 << s));
}

// 32 consecutive values of a row from p, as floats: four (eight for float32) 16-byte loads
// where p is 16-byte aligned, else a load a value. A lane's 32 values are 64 bytes apart
// from its neighbour's, so each scalar load of a warp touched 16-32 sectors and launch 1
// spent 64 of them a lane on x (H100 SASS: LDG.E.U16 x 64): most of its L1 traffic at
// B=16. The same values either way. H100, session 38 (kernels/bench/moe_experts_ab.py
// against the scalar loads): moe_experts at N=16 165.2 -> 134.7 us, N=32 295.6 -> 235.4. With
// the unaligned branch ptxas keeps more weight loads in flight (158 registers, 12 of a
// warp's 16-byte loads issued together): that beat both a version with no branch (98
// registers, 145.8 us at N=16) and one that shifts aligned words into place (144.1 us).
template <typename T>
__device__ __forceinline__ void load32(const T* p, float* v) {
  constexpr int PER = 16 / sizeof(T);
  if ((reinterpret_cast<size_t>(p) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < 32 / PER; ++k) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[k];
      T e[PER];
      memcpy(e, &u, 16);
#pragma unroll
      for (int t = 0; t < PER; ++t) v[k * PER + t] = static_cast<float>(e[t]);
    }
  } else {
#pragma unroll
    for (int t = 0; t < 32; ++t) v[t] = static_cast<float>(p[t]);
  }
}

// STAGED launch 1: each lane copies its 16-byte pieces of the warp's weight rows into its
// own slots of shared memory with cp.async (no register held while a copy is in flight,
// where a load into registers holds four until used) and reads them back after
// cp.async.wait_group. A lane reads only what it copied: no warp or block barrier. The
// CPU shim (TANDEM_SHIM) copies at once and provides dyn_smem.
#ifndef TANDEM_SHIM
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  unsigned s;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
               : "=r"(s) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(PENDING) : "memory");
}
template <typename T>
__device__ __forceinline__ T* dyn_smem() {
  extern __shared__ __align__(16) unsigned char tandem_dyn_smem[];
  return reinterpret_cast<T*>(tandem_dyn_smem);
}
#endif

// sum over the 32 weights of a chunk of q[t] * x[t] (q: 4 words, 8 nibbles each, low first)
__device__ __forceinline__ float dot32(const uint4 q, const float* x) {
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int t = 0; t < 8; ++t) acc += nibble(w[i], t) * x[8 * i + t];
  }
  return acc;
}
"""

_CUDA_GATE_UP = Template("""
  constexpr int WPR = D / 8;                  // uint32 words per row
  constexpr int NCHUNK = D / 32;              // 32-weight chunks (one uint4) per row
  constexpr int NCH = (NCHUNK + 31) / 32;     // chunks per lane
  constexpr int G = D / GS;                   // groups per row
  constexpr int TILES = I / RPW;
  constexpr int KK = K + (SHARED ? 1 : 0);    // experts a token runs: its k, the shared one
  const int N = x_shape[0];
  const int lane = threadIdx.x % 32;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  // TILE_MAJOR: the warps of one row tile of every pair are neighbours in the grid, so
  // pairs that share an expert (tokens that chose the same one; every token's shared
  // expert) read its rows at about the same time, all but the first from L2. Else each
  // pair's tiles are neighbours (one expert's rows in a block).
  const int pair = TILE_MAJOR ? warp % (N * KK) : warp / TILES;   // n * KK + j
  const int tile = TILE_MAJOR ? warp / (N * KK) : warp % TILES;
  if (pair >= N * KK || tile >= TILES) return;                   // whole warps
  const int i0 = tile * RPW;
  const int n = pair / KK;
  const int j = pair % KK;
  const bool own = SHARED && j == K;          // the shared expert: its own arrays
$expert
  const uint32_t* wm = own ? sw : w;
  const auto* sm = own ? ss : scales;
  const auto* bm = own ? sb : biases;
  const size_t rows = own ? size_t(RS) : size_t(R);
$first
  int tok = n, jt = j;                        // the token this pass runs, and its slot
  const size_t rg0 = e * rows + i0;           // gate rows; the up rows are I further
  for (;;) {
  // STAGED: every chunk's copies are issued first, a commit group a chunk (an empty group
  // where the lane has no chunk), so x's loads and the first chunk's arithmetic run while
  // the later chunks' bytes are on their way. A lane's slots: [chunk][gate rows, up rows].
  uint4* st = nullptr;
  if (STAGED) {
    st = dyn_smem<uint4>() + (threadIdx.x / 32) * (NCH * 2 * RPW * 32) + lane;
#pragma unroll
    for (int it = 0; it < NCH; ++it) {
      const int c = it * 32 + lane;
      if (c < NCHUNK) {
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
          const size_t rg = rg0 + r, ru = rg + I;
          cp_async16(st + (it * 2 * RPW + r) * 32, reinterpret_cast<const uint4*>(wm + rg * WPR) + c);
          cp_async16(st + (it * 2 * RPW + RPW + r) * 32,
                     reinterpret_cast<const uint4*>(wm + ru * WPR) + c);
        }
      }
      cp_async_commit();
    }
  }
  const auto* xr = $x_row;
  float xv[NCH][32];
  float xs[NCH];
#pragma unroll
  for (int it = 0; it < NCH; ++it) {
    const int c = it * 32 + lane;
    if (c < NCHUNK) {
$x_chunk
    } else {
#pragma unroll
      for (int t = 0; t < 32; ++t) xv[it][t] = 0.f;
    }
    xs[it] = 0.f;
#pragma unroll
    for (int t = 0; t < 32; ++t) xs[it] += xv[it][t];
  }
  // A chunk's words and scales of all RPW gate and up rows are loaded before any is used,
  // and the sums reduced after the last chunk: 2 RPW 16-byte loads in flight a lane, where
  // a row at a time (load, dot, reduce, store) left 4 and the warp idle in between. Each
  // row's sum runs over the chunks in the same order as before: the same floats.
  float ag[RPW], au[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) ag[r] = au[r] = 0.f;
#pragma unroll
  for (int it = 0; it < NCH; ++it) {
    const int c = it * 32 + lane;
    if (STAGED) {                             // chunk it's group done (groups end in order)
      if (it + 1 < NCH) cp_async_wait<1>(); else cp_async_wait<0>();
    }
    if (c < NCHUNK) {
      const int grp = c * 32 / GS;
      uint4 qg[RPW], qu[RPW];
      float sg[RPW], bg[RPW], su[RPW], bu[RPW];
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const size_t rg = rg0 + r, ru = rg + I;
        if (STAGED) {
          qg[r] = st[(it * 2 * RPW + r) * 32];
          qu[r] = st[(it * 2 * RPW + RPW + r) * 32];
        } else {
          qg[r] = reinterpret_cast<const uint4*>(wm + rg * WPR)[c];
          qu[r] = reinterpret_cast<const uint4*>(wm + ru * WPR)[c];
        }
        sg[r] = static_cast<float>(sm[rg * G + grp]);
        bg[r] = static_cast<float>(bm[rg * G + grp]);
        su[r] = static_cast<float>(sm[ru * G + grp]);
        bu[r] = static_cast<float>(bm[ru * G + grp]);
      }
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        ag[r] += sg[r] * dot32(qg[r], xv[it]) + bg[r] * xs[it];
        au[r] += su[r] * dot32(qu[r], xv[it]) + bu[r] * xs[it];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const float g = warp_sum(ag[r]);
    const float u = warp_sum(au[r]);
    if (lane == 0) h[(size_t(tok) * KK + jt) * I + i0 + r] = g / (1.f + __expf(-g)) * u;
  }
$next
  }
""")

_CUDA_DOWN = Template("""
  constexpr int WPR = I / 8;                  // uint32 words per down row
  constexpr int CPR = I / 32;                 // chunks per down row
  constexpr int KK = K + (SHARED ? 1 : 0);    // experts a token runs: its k, the shared one
  constexpr int NC = KK * CPR;                // chunks of one output row, all experts
  constexpr int CPL = (NC + 31) / 32;         // chunks per lane
  constexpr int G = I / GS;
  constexpr int RPB = 8 * RPW;                // rows per block: 8 warps
  constexpr int BPT = D / RPB;                // blocks per token
  __shared__ float sh[NC * 36];               // s * h, 32-float chunks padded to 36
  // the grid is exact (tokens x BPT blocks): no early return. TILE_MAJOR as launch 1: the
  // blocks of one row block of every token are neighbours
  const int tokens = gridDim.x / BPT;
  const int n = TILE_MAJOR ? blockIdx.x % tokens : blockIdx.x / BPT;
  const int d0 = (TILE_MAJOR ? blockIdx.x / tokens : blockIdx.x % BPT) * RPB
                 + (threadIdx.x / 32) * RPW;
  const int lane = threadIdx.x % 32;
  float sgate = 0.f;                          // the shared expert's weight
  if (SHARED) {
    // the gate: column SGC of its input (0 for a gate [N, 1]; E where the input is the
    // router's joined output [N, >E], logits then the shared gate: no split before)
    sgate = 1.f / (1.f + __expf(-static_cast<float>(
        gate[n * gate_strides[0] + SGC * gate_strides[1]])));
  }
$route
  // STAGED_DOWN: each lane's pieces of the warp's rows are copied into its own slots of
  // shared memory (cp.async, one commit group) before the block stages s * h, so their
  // latency runs under that staging and its barrier, where the loads were issued after it.
  uint4* st = nullptr;
  if (STAGED_DOWN) {
    st = dyn_smem<uint4>() + (threadIdx.x / 32) * (CPL * RPW * 32) + lane;
#pragma unroll
    for (int it = 0; it < CPL; ++it) {
      const int c = it * 32 + lane;
      if (c < NC) {
        const int j = c / CPR;
        const bool mine = SHARED && j == K;
        // the shared expert's chunks read no id (a token has K of them)
        const size_t base = mine ? 0 : static_cast<size_t>($expert) * D;
        const uint32_t* wm = mine ? sw : w;
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
          cp_async16(st + (it * RPW + r) * 32,
                     reinterpret_cast<const uint4*>(wm + (base + d0 + r) * WPR) + c % CPR);
        }
      }
    }
    cp_async_commit();
  }
  // Four values a load (I % 32 == 0: a float4 stays within one expert and one chunk): a
  // quarter of the loop's trips, and each block's staging ends sooner. H100, session 38:
  // moe_experts at N=16 134.7 -> 122.4 us, N=32 235.2 -> 212.5 us, the same floats.
  for (int t4 = threadIdx.x; t4 < KK * I / 4; t4 += blockDim.x) {
    const int t = 4 * t4;
    const int j = t / I;
    const float s = j < K ? $score : sgate;
    const float4 h4 = reinterpret_cast<const float4*>(h + size_t(n) * KK * I)[t4];
    *reinterpret_cast<float4*>(sh + (t / 32) * 36 + t % 32) =
        make_float4(s * h4.x, s * h4.y, s * h4.z, s * h4.w);
  }
  __syncthreads();
  size_t rows[CPL];                           // this lane's chunks: expert row base, part
  int part[CPL];
  bool own[CPL];                              // a chunk of the shared expert
  float hs[CPL];
#pragma unroll
  for (int it = 0; it < CPL; ++it) {
    const int c = it * 32 + lane;
    const int cc = c < NC ? c : 0;
    const int j = cc / CPR;
    own[it] = SHARED && j == K;
    rows[it] = own[it] ? 0 : static_cast<size_t>($expert) * D;   // no id read for the shared
    part[it] = cc % CPR;
    float s = 0.f;
#pragma unroll
    for (int t = 0; t < 32; ++t) s += sh[cc * 36 + t];
    hs[it] = s;
  }
  // As launch 1: a chunk's words and scales of all RPW rows are loaded before any is used,
  // the sums reduced after the last chunk (each row's sum in the same order as before).
  float acc[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) acc[r] = 0.f;
  if (STAGED_DOWN) cp_async_wait<0>();
#pragma unroll
  for (int it = 0; it < CPL; ++it) {
    const int c = it * 32 + lane;
    if (c < NC) {
      const uint32_t* wm = own[it] ? sw : w;
      const auto* sm = own[it] ? ss : scales;
      const auto* bm = own[it] ? sb : biases;
      const int grp = part[it] * 32 / GS;
      uint4 q[RPW];
      float sc[RPW], bi[RPW];
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const size_t row = rows[it] + d0 + r;
        q[r] = STAGED_DOWN ? st[(it * RPW + r) * 32]
                           : reinterpret_cast<const uint4*>(wm + row * WPR)[part[it]];
        sc[r] = static_cast<float>(sm[row * G + grp]);
        bi[r] = static_cast<float>(bm[row * G + grp]);
      }
#pragma unroll
      for (int r = 0; r < RPW; ++r) acc[r] += sc[r] * dot32(q[r], sh + c * 36) + bi[r] * hs[it];
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int d = d0 + r;
    float a = warp_sum(acc[r]);
    if (RES) {
      a += static_cast<float>(residual[n * residual_strides[0] + d * residual_strides[1]]);
    }
    if (lane == 0) y[size_t(n) * D + d] = static_cast<OutT>(a);
  }
""")

_TEMPLATES = {"cuda": (_CUDA_HEADER, _CUDA_GATE_UP, _CUDA_DOWN),
              "metal": (METAL_HEADER, METAL_GATE_UP, METAL_DOWN)}

# Launch 1 with DEDUPE (a template constant; idx given): the first token to choose a routed
# expert runs every later token that chose it too, right after its own, while the rows
# are in L1/L2, and the later tokens' warps for that expert leave. Each (token, row) sum is
# the same floats as without. Warp-uniform: every lane gets warp_sum's total.
_DEDUPE_FIRST = """  if (DEDUPE && !own) {
    float earlier = 0.f;
    for (int p = lane; p < n * K; p += 32) earlier += float(int(idx[p]) == int(e));
    if (warp_sum(earlier) > 0.f) return;
  }"""
_DEDUPE_NEXT = """  if (!DEDUPE || own) break;
  int slot = -1;                              // the next token that chose e, and its slot
  while (slot < 0 && ++tok < N) {
    const bool hit = lane < K && int(idx[tok * K + lane]) == int(e);
    slot = int(warp_sum(hit ? float(lane + 1) : 0.f)) - 1;
  }
  if (slot < 0) break;
  jt = slot;"""

# moe_experts.py's kernels: the expert ids and weights are inputs (idx [N, k] dense in
# launch 1; idx and scores read through their strides in launch 2); x is dense.
IDX_HOOKS = {
    "gate_up": {"expert": "  const size_t e = own ? 0 : static_cast<size_t>(idx[n * K + j]);",
                "x_row": "x + size_t(tok) * D", "x_at": "c * 32 + t",
                "x_chunk": "      load32(xr + c * 32, xv[it]);",
                "first": _DEDUPE_FIRST, "next": _DEDUPE_NEXT},
    "down": {"route": "", "expert": "idx[n * idx_strides[0] + j * idx_strides[1]]",
             "score": "static_cast<float>(scores[n * scores_strides[0] + j * scores_strides[1]])"},
}


def sources(backend: str, hooks: dict, extra_header: str = "") -> tuple[str, str, str]:
    """(header, gate_up, down) of `backend` with `hooks` filled in."""
    header, gate_up, down = _TEMPLATES[backend]
    return (header + extra_header, gate_up.substitute(hooks["gate_up"]),
            down.substitute(hooks["down"]))


_SOURCES = {backend: sources(backend, IDX_HOOKS) for backend in _TEMPLATES}
