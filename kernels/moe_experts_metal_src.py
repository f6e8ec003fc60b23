"""Metal sources of the MoE experts kernels: kernels/moe_experts_src.py's CUDA templates
with the same layouts and hooks, for Apple GPUs (SIMD width 32). Written to match the CUDA
bodies; they keep the row-at-a-time loop and float(q) (DEDUPE and TILE_MAJOR are CUDA only).
"""
from string import Template

# Same layouts for Metal (SIMD width 32). It cannot run on the Linux machines: the
# self-test guards it at engine start.
METAL_HEADER = """
inline float dot32(const uint4 q, const thread float* x) {
  const uint w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.0f;
  for (int i = 0; i < 4; ++i) {
    for (int t = 0; t < 8; ++t) acc += float((w[i] >> (4 * t)) & 0xFu) * x[8 * i + t];
  }
  return acc;
}

inline float dot32(const uint4 q, const threadgroup float* x) {
  const uint w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.0f;
  for (int i = 0; i < 4; ++i) {
    for (int t = 0; t < 8; ++t) acc += float((w[i] >> (4 * t)) & 0xFu) * x[8 * i + t];
  }
  return acc;
}
"""

METAL_GATE_UP = Template("""
  constexpr int WPR = D / 8;
  constexpr int NCHUNK = D / 32;
  constexpr int NCH = (NCHUNK + 31) / 32;
  constexpr int G = D / GS;
  constexpr int TILES = I / RPW;
  constexpr int KK = K + (SHARED ? 1 : 0);
  const int N = x_shape[0];
  const int lane = int(thread_index_in_simdgroup);
  const int warp = int(thread_position_in_grid.x) / 32;
  const int pair = warp / TILES;
  if (pair >= N * KK) return;
  const int i0 = (warp % TILES) * RPW;
  const int n = pair / KK;
  const int j = pair % KK;
  const bool own = SHARED && j == K;
$expert
  auto wm = own ? sw : w;
  auto sm = own ? ss : scales;
  auto bm = own ? sb : biases;
  const size_t rows = own ? size_t(RS) : size_t(R);
  const int tok = n;                          // (DEDUPE: CUDA only)
  auto xr = $x_row;
  float xv[NCH][32];
  float xs[NCH];
  for (int it = 0; it < NCH; ++it) {
    const int c = it * 32 + lane;
    xs[it] = 0.0f;
    for (int t = 0; t < 32; ++t) {
      xv[it][t] = c < NCHUNK ? static_cast<float>(xr[$x_at]) : 0.0f;
      xs[it] += xv[it][t];
    }
  }
  for (int r = 0; r < RPW; ++r) {
    const size_t rg = e * rows + i0 + r;
    const size_t ru = rg + I;
    auto wg = reinterpret_cast<const device uint4*>(wm + rg * WPR);
    auto wu = reinterpret_cast<const device uint4*>(wm + ru * WPR);
    float ag = 0.0f, au = 0.0f;
    for (int it = 0; it < NCH; ++it) {
      const int c = it * 32 + lane;
      if (c < NCHUNK) {
        const int grp = c * 32 / GS;
        ag += static_cast<float>(sm[rg * G + grp]) * dot32(wg[c], xv[it])
              + static_cast<float>(bm[rg * G + grp]) * xs[it];
        au += static_cast<float>(sm[ru * G + grp]) * dot32(wu[c], xv[it])
              + static_cast<float>(bm[ru * G + grp]) * xs[it];
      }
    }
    ag = simd_sum(ag);
    au = simd_sum(au);
    if (lane == 0) h[size_t(pair) * I + i0 + r] = ag / (1.0f + metal::exp(-ag)) * au;
  }
""")

METAL_DOWN = Template("""
  constexpr int WPR = I / 8;
  constexpr int CPR = I / 32;
  constexpr int KK = K + (SHARED ? 1 : 0);
  constexpr int NC = KK * CPR;
  constexpr int CPL = (NC + 31) / 32;
  constexpr int G = I / GS;
  constexpr int RPB = 8 * RPW;
  constexpr int BPT = D / RPB;
  threadgroup float sh[NC * 36];
  const int tid = int(thread_position_in_threadgroup.x);
  const int n = int(threadgroup_position_in_grid.x) / BPT;
  const int d0 = (int(threadgroup_position_in_grid.x) % BPT) * RPB + (tid / 32) * RPW;
  const int lane = int(thread_index_in_simdgroup);
  float sgate = 0.0f;
  if (SHARED) {
    sgate = 1.0f / (1.0f + metal::exp(-static_cast<float>(
        gate[n * gate_strides[0] + SGC * gate_strides[1]])));
  }
$route
  for (int t = tid; t < KK * I; t += 256) {
    const int j = t / I;
    const float s = j < K ? $score : sgate;
    sh[(t / 32) * 36 + t % 32] = s * h[size_t(n) * KK * I + t];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  size_t rows[CPL];
  int part[CPL];
  bool own[CPL];
  float hs[CPL];
  for (int it = 0; it < CPL; ++it) {
    const int c = it * 32 + lane;
    const int cc = c < NC ? c : 0;
    const int j = cc / CPR;
    own[it] = SHARED && j == K;
    rows[it] = own[it] ? 0 : static_cast<size_t>($expert) * D;   // no id read for the shared
    part[it] = cc % CPR;
    float s = 0.0f;
    for (int t = 0; t < 32; ++t) s += sh[cc * 36 + t];
    hs[it] = s;
  }
  for (int r = 0; r < RPW; ++r) {
    const int d = d0 + r;
    float acc = 0.0f;
    for (int it = 0; it < CPL; ++it) {
      const int c = it * 32 + lane;
      if (c < NC) {
        const size_t row = rows[it] + d;
        auto wm = own[it] ? sw : w;
        auto sm = own[it] ? ss : scales;
        auto bm = own[it] ? sb : biases;
        const uint4 q = reinterpret_cast<const device uint4*>(wm + row * WPR)[part[it]];
        const int grp = part[it] * 32 / GS;
        acc += static_cast<float>(sm[row * G + grp]) * dot32(q, sh + c * 36)
               + static_cast<float>(bm[row * G + grp]) * hs[it];
      }
    }
    acc = simd_sum(acc);
    if (RES) {
      acc += static_cast<float>(residual[n * residual_strides[0] + d * residual_strides[1]]);
    }
    if (lane == 0) y[size_t(n) * D + d] = static_cast<OutT>(acc);
  }
""")
