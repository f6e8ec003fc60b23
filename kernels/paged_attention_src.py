"""CUDA and Metal sources of the paged decode attention (see paged_attention.py for
the contract). Kept apart so each file stays readable; both passes share one
partial layout: part_acc [B, Hq, S, D] unnormalised sums, part_ml [B, Hq, S, 2]
(running max in the log2 domain, softmax denominator).
"""

_CUDA_HEADER = """
#define NEG_INF (-__int_as_float(0x7f800000))

template <typename T, int N>
__device__ __forceinline__ void load_vec(const T* p, float* out) {
  // N contiguous elements as 16-byte loads when the element size allows.
  if constexpr (sizeof(T) == 2 && N % 8 == 0) {
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      alignas(16) T tmp[8];
      *reinterpret_cast<uint4*>(tmp) = *reinterpret_cast<const uint4*>(p + 8 * c);
#pragma unroll
      for (int i = 0; i < 8; ++i) out[8 * c + i] = static_cast<float>(tmp[i]);
    }
  } else if constexpr (sizeof(T) == 4 && N % 4 == 0) {
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
      float4 f = *reinterpret_cast<const float4*>(p + 4 * c);
      out[4 * c] = f.x; out[4 * c + 1] = f.y; out[4 * c + 2] = f.z; out[4 * c + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = static_cast<float>(p[i]);
  }
}
"""

# Pass 1. Block = NW warps of one (b, hkv), warp w takes split s = sb*NW + w.
# QK: lane = 4*kg + kl scores key j0+kg of the tile over 8-element chunks
# c = kl + 4i (two xor-shuffles finish the dot). PV: lane owns D/32 contiguous
# output elements and walks the tile's keys.
_CUDA_PASS1 = """
  constexpr int TILE = 8;
  constexpr int CH = D / 32;      // QK chunks of 8 per lane
  constexpr int EV = D / 32;      // PV elements per lane
  constexpr int Hq = Hkv * G;
  __shared__ float qs[G * D];
  __shared__ float sc[NW][TILE][G];
  const int P = block_tables_shape[1];
  const int S = (P * PS + KPS - 1) / KPS;
  const int SB = (S + NW - 1) / NW;
  const int sb = blockIdx.x % SB;
  const int n = blockIdx.x / SB;
  const int hkv = n % Hkv;
  const int b = n / Hkv;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int s = sb * NW + warp;
  const float qscale = scale[0] * 1.4426950408889634f;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    qs[i] = static_cast<float>(q[(size_t(b) * Hq + hkv * G) * D + i]) * qscale;
  }
  __syncthreads();
  if (s >= S) return;
  const int start = s * KPS;
  const int end = min(start + KPS, int(context_lens[b]));
  const int* bt = block_tables + size_t(b) * P;
  float m[G], l[G], acc[G][EV];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = NEG_INF; l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < EV; ++e) acc[g][e] = 0.f;
  }
  const int kg = lane / 4, kl = lane % 4;
  for (int j0 = start; j0 < end; j0 += TILE) {
    const int j = j0 + kg;
    long long r = 0;                                   // pool row of this lane's key
    if (j < end) r = (long long)bt[j / PS] * PS + j % PS;
    // The tile's V rows, issued now so their latency overlaps the QK math.
    float vf[TILE][EV];
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
      const long long rt = __shfl_sync(0xffffffffu, r, 4 * t);
      if (j0 + t < end) load_vec<KT, EV>(v_pool + (rt * Hkv + hkv) * D + lane * EV, vf[t]);
    }
    float sg[G];
#pragma unroll
    for (int g = 0; g < G; ++g) sg[g] = 0.f;
    if (j < end) {
      const auto* kp = k_pool + (r * Hkv + hkv) * D;
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        const int c = kl + 4 * i;
        float kf[8];
        load_vec<KT, 8>(kp + 8 * c, kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float4 qa = *reinterpret_cast<const float4*>(qs + g * D + 8 * c);
          const float4 qb = *reinterpret_cast<const float4*>(qs + g * D + 8 * c + 4);
          sg[g] += kf[0] * qa.x + kf[1] * qa.y + kf[2] * qa.z + kf[3] * qa.w
                 + kf[4] * qb.x + kf[5] * qb.y + kf[6] * qb.z + kf[7] * qb.w;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      sg[g] += __shfl_xor_sync(0xffffffffu, sg[g], 1);
      sg[g] += __shfl_xor_sync(0xffffffffu, sg[g], 2);
    }
    if (kl == 0) {
#pragma unroll
      for (int g = 0; g < G; ++g) sc[warp][kg][g] = (j < end) ? sg[g] : NEG_INF;
    }
    __syncwarp();
    const int nk = min(TILE, end - j0);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mt = m[g];
#pragma unroll
      for (int t = 0; t < TILE; ++t) mt = fmaxf(mt, sc[warp][t][g]);   // -inf past nk
      const float corr = exp2f(m[g] - mt);
      m[g] = mt;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < EV; ++e) acc[g][e] *= corr;
    }
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
      if (t < nk) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float p = exp2f(sc[warp][t][g] - m[g]);
          l[g] += p;
#pragma unroll
          for (int e = 0; e < EV; ++e) acc[g][e] += p * vf[t][e];
        }
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const size_t o = (size_t(b) * Hq + hkv * G + g) * S + s;   // [B, Hq, S]
#pragma unroll
    for (int e = 0; e < EV; ++e) part_acc[o * D + lane * EV + e] = acc[g][e];
    if (lane == 0) { part_ml[2 * o] = m[g]; part_ml[2 * o + 1] = l[g]; }
  }
"""

# Pass 2: one block of D threads per (b, hq) merges the S splits.
_CUDA_PASS2 = """
  const int S = part_ml_shape[2];
  const size_t bh = blockIdx.x;
  const int d = threadIdx.x;
  const float* ml = part_ml + bh * S * 2;
  float M = NEG_INF;
  for (int s = 0; s < S; ++s) M = fmaxf(M, ml[2 * s]);
  float num = 0.f, den = 0.f;
  for (int s = 0; s < S; ++s) {
    const float l = ml[2 * s + 1];
    if (l > 0.f) {
      const float w = exp2f(ml[2 * s] - M);
      num += w * part_acc[(bh * S + s) * D + d];
      den += w * l;
    }
  }
  float o = den > 0.f ? num / den : 0.f;
  if (GATED) {     // the output gate: o * sigmoid(gate[b, h, d]), gate read through its strides
    // GATED=2: gate is the joined q+gate projection [B, Hq*2D], head h's gate its columns
    // h*2D + D + d (Qwen's layout: no reshape and slice before the launch)
    const int Hq = part_ml_shape[1];
    const int64_t at = GATED == 2
        ? (bh / Hq) * gate_strides[0] + ((bh % Hq) * 2 * D + D + d) * gate_strides[1]
        : (bh / Hq) * gate_strides[0] + (bh % Hq) * gate_strides[1] + d * gate_strides[2];
    const float gt = static_cast<float>(gate[at]);
    o = o / (1.f + __expf(-gt));
  }
  out[bh * D + d] = static_cast<OutT>(o);
"""

# Metal: same two passes, same partial layout; simdgroups of 32 stand in for warps.
_METAL_PASS1 = """
  constexpr int TILE = 8;
  constexpr int CH = D / 32;
  constexpr int EV = D / 32;
  constexpr int Hq = Hkv * G;
  threadgroup float qs[G * D];
  threadgroup float sc[NW][TILE][G];
  const int P = block_tables_shape[1];
  const int S = (P * PS + KPS - 1) / KPS;
  const int SB = (S + NW - 1) / NW;
  const int blk = int(threadgroup_position_in_grid.x);
  const int tix = int(thread_position_in_threadgroup.x);
  const int sb = blk % SB;
  const int n = blk / SB;
  const int hkv = n % Hkv;
  const int b = n / Hkv;
  const int warp = tix / 32;
  const int lane = tix % 32;
  const int s = sb * NW + warp;
  const float qscale = scale[0] * 1.4426950408889634f;
  for (int i = tix; i < G * D; i += NW * 32) {
    qs[i] = static_cast<float>(q[(size_t(b) * Hq + hkv * G) * D + i]) * qscale;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (s >= S) return;
  const int start = s * KPS;
  const int end = min(start + KPS, int(context_lens[b]));
  float m[G], l[G], acc[G][EV];
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY; l[g] = 0.0f;
    for (int e = 0; e < EV; ++e) acc[g][e] = 0.0f;
  }
  const int kg = lane / 4, kl = lane % 4;
  for (int j0 = start; j0 < end; j0 += TILE) {
    const int j = j0 + kg;
    float sg[G];
    for (int g = 0; g < G; ++g) sg[g] = 0.0f;
    if (j < end) {
      const size_t r = size_t(block_tables[size_t(b) * P + j / PS]) * PS + j % PS;
      auto kp = k_pool + (r * Hkv + hkv) * D;
      for (int i = 0; i < CH; ++i) {
        const int c = kl + 4 * i;
        for (int e = 0; e < 8; ++e) {
          const float kf = static_cast<float>(kp[8 * c + e]);
          for (int g = 0; g < G; ++g) sg[g] += kf * qs[g * D + 8 * c + e];
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      sg[g] += simd_shuffle_xor(sg[g], ushort(1));
      sg[g] += simd_shuffle_xor(sg[g], ushort(2));
    }
    if (kl == 0) {
      for (int g = 0; g < G; ++g) sc[warp][kg][g] = (j < end) ? sg[g] : -INFINITY;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    const int nk = min(TILE, end - j0);
    for (int g = 0; g < G; ++g) {
      float mt = m[g];
      for (int t = 0; t < nk; ++t) mt = fmax(mt, sc[warp][t][g]);
      const float corr = metal::exp2(m[g] - mt);
      m[g] = mt;
      l[g] *= corr;
      for (int e = 0; e < EV; ++e) acc[g][e] *= corr;
    }
    for (int t = 0; t < nk; ++t) {
      const int jj = j0 + t;
      const size_t r = size_t(block_tables[size_t(b) * P + jj / PS]) * PS + jj % PS;
      auto vp = v_pool + (r * Hkv + hkv) * D + lane * EV;
      for (int g = 0; g < G; ++g) {
        const float p = metal::exp2(sc[warp][t][g] - m[g]);
        l[g] += p;
        for (int e = 0; e < EV; ++e) acc[g][e] += p * static_cast<float>(vp[e]);
      }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (int g = 0; g < G; ++g) {
    const size_t o = (size_t(b) * Hq + hkv * G + g) * S + s;
    for (int e = 0; e < EV; ++e) part_acc[o * D + lane * EV + e] = acc[g][e];
    if (lane == 0) { part_ml[2 * o] = m[g]; part_ml[2 * o + 1] = l[g]; }
  }
"""

_METAL_PASS2 = """
  const int S = part_ml_shape[2];
  const size_t bh = threadgroup_position_in_grid.x;
  const int d = int(thread_position_in_threadgroup.x);
  auto ml = part_ml + bh * S * 2;
  float M = -INFINITY;
  for (int s = 0; s < S; ++s) M = fmax(M, ml[2 * s]);
  float num = 0.0f, den = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float l = ml[2 * s + 1];
    if (l > 0.0f) {
      const float w = metal::exp2(ml[2 * s] - M);
      num += w * part_acc[(bh * S + s) * D + d];
      den += w * l;
    }
  }
  float o = den > 0.0f ? num / den : 0.0f;
  if (GATED) {
    const int Hq = part_ml_shape[1];
    const int64_t at = GATED == 2
        ? (bh / Hq) * gate_strides[0] + ((bh % Hq) * 2 * D + D + d) * gate_strides[1]
        : (bh / Hq) * gate_strides[0] + (bh % Hq) * gate_strides[1] + d * gate_strides[2];
    const float gt = static_cast<float>(gate[at]);
    o = o / (1.0f + metal::exp(-gt));
  }
  out[bh * D + d] = static_cast<OutT>(o);
"""
