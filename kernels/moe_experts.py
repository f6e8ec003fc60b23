"""Routed experts at decode as gathered matrix-vector products, in two launches.

For each token n and its k chosen experts e = idx[n, j] with weights s = scores[n, j]
(4-bit affine experts, the gate and up projections joined along the output axis):

    h[n, j] = silu(Wg[e] x[n]) * (Wu[e] x[n])          # launch 1: gate+up, SwiGLU  [N, k, I]
    y[n]    = sum_j s[n, j] * Wd[e] h[n, j]            # launch 2: down, weighted sum  [N, D]

The model's plain path is four launches and more (two gathered tiled matmuls, the
SwiGLU, the weighted-sum matmul); at decode the tiled kernel runs one-row products
(H200, B=1: 80 calls of 18.4 us a step). Here each warp streams whole weight rows
with 16-byte loads, every active expert's bytes are read once per token, and the
unused 248 experts are never touched. Each token re-reads its own experts, so the
kernel is for few tokens (`MAX_PAIRS`); a prefill chunk keeps the sorted gathered
matmul, which reads each expert once for all its tokens.

Layout (MLX affine quantization, ``mx.quantize``): weight uint32 [E, rows, cols/8]
(weight t of a word in bits 4t..4t+3), scales and biases [E, rows, cols/group];
w = scale * q + bias. gate_up rows [0, I) are the gate, [I, 2I) the up projection
(zero rows may follow: the GPU row padding of engine/models/fused.py).

Launch 1: one warp per (token, expert, RPW1 outputs); a lane holds its 32-weight
chunks of x in registers and reuses them for every row. Launch 2: one block per
(token, 8 * RPW2 output rows) stages s * h of the token's k experts in shared memory
(chunks padded to 36 floats: conflict-free float4 reads), one warp per output row
reads its k rows (k * I / 32 chunks over 32 lanes) and reduces once.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from kernels.stand_in import COUNT, StandInKernel

NAME = "moe_experts"
# Pairs (token, expert) up to which the kernel runs: decode batches. Each pair reads
# its expert's rows (1.5 MB at the real shapes); the sorted gathered matmul reads each
# distinct expert once, so it wins once many tokens share experts. To tune on the GPU.
MAX_PAIRS = 128
RPW1 = 4          # gate/up outputs per warp (launch 1)
RPW2 = 2          # down rows per warp (launch 2); 8 warps a block
SMEM_BYTES = 32 * 1024   # launch 2's staged s * h: within Metal's 32 KB threadgroup memory
GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class QuantExperts:
    """Stacked 4-bit affine experts: joined gate+up [E, >= 2I, D/8] and down [E, D, I/8]
    (uint32), with their scales and biases; hidden = I."""
    gate_up: tuple[mx.array, mx.array, mx.array]
    down: tuple[mx.array, mx.array, mx.array]
    hidden: int
    group_size: int
    bits: int = 4
    mode: str = "affine"


_CUDA_HEADER = """
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// sum over the 32 weights of a chunk of q[t] * x[t] (q: 4 words, 8 nibbles each, low first)
__device__ __forceinline__ float dot32(const uint4 q, const float* x) {
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int t = 0; t < 8; ++t) acc += float((w[i] >> (4 * t)) & 0xFu) * x[8 * i + t];
  }
  return acc;
}
"""

_CUDA_GATE_UP = """
  constexpr int WPR = D / 8;                  // uint32 words per row
  constexpr int NCHUNK = D / 32;              // 32-weight chunks (one uint4) per row
  constexpr int NCH = (NCHUNK + 31) / 32;     // chunks per lane
  constexpr int G = D / GS;                   // groups per row
  constexpr int TILES = I / RPW;
  const int N = x_shape[0];
  const int lane = threadIdx.x % 32;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int pair = warp / TILES;              // n * K + j
  if (pair >= N * K) return;                  // whole warps
  const int i0 = (warp % TILES) * RPW;
  const int n = pair / K;
  const size_t e = static_cast<size_t>(idx[pair]);
  const auto* xr = x + size_t(n) * D;
  float xv[NCH][32];
  float xs[NCH];
#pragma unroll
  for (int it = 0; it < NCH; ++it) {
    const int c = it * 32 + lane;
    xs[it] = 0.f;
#pragma unroll
    for (int t = 0; t < 32; ++t) {
      xv[it][t] = c < NCHUNK ? static_cast<float>(xr[c * 32 + t]) : 0.f;
      xs[it] += xv[it][t];
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const size_t rg = e * R + i0 + r;         // gate row; the up row is I further
    const size_t ru = rg + I;
    const uint4* wg = reinterpret_cast<const uint4*>(w + rg * WPR);
    const uint4* wu = reinterpret_cast<const uint4*>(w + ru * WPR);
    float ag = 0.f, au = 0.f;
#pragma unroll
    for (int it = 0; it < NCH; ++it) {
      const int c = it * 32 + lane;
      if (c < NCHUNK) {
        const int grp = c * 32 / GS;
        const uint4 qg = wg[c];
        const uint4 qu = wu[c];
        ag += static_cast<float>(scales[rg * G + grp]) * dot32(qg, xv[it])
              + static_cast<float>(biases[rg * G + grp]) * xs[it];
        au += static_cast<float>(scales[ru * G + grp]) * dot32(qu, xv[it])
              + static_cast<float>(biases[ru * G + grp]) * xs[it];
      }
    }
    ag = warp_sum(ag);
    au = warp_sum(au);
    if (lane == 0) h[size_t(pair) * I + i0 + r] = ag / (1.f + __expf(-ag)) * au;
  }
"""

_CUDA_DOWN = """
  constexpr int WPR = I / 8;                  // uint32 words per down row
  constexpr int CPR = I / 32;                 // chunks per down row
  constexpr int NC = K * CPR;                 // chunks of one output row, all experts
  constexpr int CPL = (NC + 31) / 32;         // chunks per lane
  constexpr int G = I / GS;
  constexpr int RPB = 8 * RPW;                // rows per block: 8 warps
  constexpr int BPT = D / RPB;                // blocks per token
  __shared__ float sh[NC * 36];               // s * h, 32-float chunks padded to 36
  const int n = blockIdx.x / BPT;             // the grid is exact: no early return
  const int d0 = (blockIdx.x % BPT) * RPB + (threadIdx.x / 32) * RPW;
  const int lane = threadIdx.x % 32;
  for (int t = threadIdx.x; t < K * I; t += blockDim.x) {
    sh[(t / 32) * 36 + t % 32] =
        static_cast<float>(scores[n * K + t / I]) * h[size_t(n) * K * I + t];
  }
  __syncthreads();
  size_t rows[CPL];                           // this lane's chunks: expert row base, part
  int part[CPL];
  float hs[CPL];
#pragma unroll
  for (int it = 0; it < CPL; ++it) {
    const int c = it * 32 + lane;
    const int cc = c < NC ? c : 0;
    rows[it] = static_cast<size_t>(idx[n * K + cc / CPR]) * D;
    part[it] = cc % CPR;
    float s = 0.f;
#pragma unroll
    for (int t = 0; t < 32; ++t) s += sh[cc * 36 + t];
    hs[it] = s;
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int d = d0 + r;
    float acc = 0.f;
#pragma unroll
    for (int it = 0; it < CPL; ++it) {
      const int c = it * 32 + lane;
      if (c < NC) {
        const size_t row = rows[it] + d;
        const uint4 q = reinterpret_cast<const uint4*>(w + row * WPR)[part[it]];
        const int grp = part[it] * 32 / GS;
        acc += static_cast<float>(scales[row * G + grp]) * dot32(q, sh + c * 36)
               + static_cast<float>(biases[row * G + grp]) * hs[it];
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) y[size_t(n) * D + d] = static_cast<OutT>(acc);
  }
"""

# Same layouts for Metal (SIMD width 32). It cannot run on the Linux machines: the
# self-test guards it at engine start.
_METAL_HEADER = """
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

_METAL_GATE_UP = """
  constexpr int WPR = D / 8;
  constexpr int NCHUNK = D / 32;
  constexpr int NCH = (NCHUNK + 31) / 32;
  constexpr int G = D / GS;
  constexpr int TILES = I / RPW;
  const int N = x_shape[0];
  const int lane = int(thread_index_in_simdgroup);
  const int warp = int(thread_position_in_grid.x) / 32;
  const int pair = warp / TILES;
  if (pair >= N * K) return;
  const int i0 = (warp % TILES) * RPW;
  const int n = pair / K;
  const size_t e = static_cast<size_t>(idx[pair]);
  auto xr = x + size_t(n) * D;
  float xv[NCH][32];
  float xs[NCH];
  for (int it = 0; it < NCH; ++it) {
    const int c = it * 32 + lane;
    xs[it] = 0.0f;
    for (int t = 0; t < 32; ++t) {
      xv[it][t] = c < NCHUNK ? static_cast<float>(xr[c * 32 + t]) : 0.0f;
      xs[it] += xv[it][t];
    }
  }
  for (int r = 0; r < RPW; ++r) {
    const size_t rg = e * R + i0 + r;
    const size_t ru = rg + I;
    auto wg = reinterpret_cast<const device uint4*>(w + rg * WPR);
    auto wu = reinterpret_cast<const device uint4*>(w + ru * WPR);
    float ag = 0.0f, au = 0.0f;
    for (int it = 0; it < NCH; ++it) {
      const int c = it * 32 + lane;
      if (c < NCHUNK) {
        const int grp = c * 32 / GS;
        ag += static_cast<float>(scales[rg * G + grp]) * dot32(wg[c], xv[it])
              + static_cast<float>(biases[rg * G + grp]) * xs[it];
        au += static_cast<float>(scales[ru * G + grp]) * dot32(wu[c], xv[it])
              + static_cast<float>(biases[ru * G + grp]) * xs[it];
      }
    }
    ag = simd_sum(ag);
    au = simd_sum(au);
    if (lane == 0) h[size_t(pair) * I + i0 + r] = ag / (1.0f + metal::exp(-ag)) * au;
  }
"""

_METAL_DOWN = """
  constexpr int WPR = I / 8;
  constexpr int CPR = I / 32;
  constexpr int NC = K * CPR;
  constexpr int CPL = (NC + 31) / 32;
  constexpr int G = I / GS;
  constexpr int RPB = 8 * RPW;
  constexpr int BPT = D / RPB;
  threadgroup float sh[NC * 36];
  const int tid = int(thread_position_in_threadgroup.x);
  const int n = int(threadgroup_position_in_grid.x) / BPT;
  const int d0 = (int(threadgroup_position_in_grid.x) % BPT) * RPB + (tid / 32) * RPW;
  const int lane = int(thread_index_in_simdgroup);
  for (int t = tid; t < K * I; t += 256) {
    sh[(t / 32) * 36 + t % 32] =
        static_cast<float>(scores[n * K + t / I]) * h[size_t(n) * K * I + t];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  size_t rows[CPL];
  int part[CPL];
  float hs[CPL];
  for (int it = 0; it < CPL; ++it) {
    const int c = it * 32 + lane;
    const int cc = c < NC ? c : 0;
    rows[it] = static_cast<size_t>(idx[n * K + cc / CPR]) * D;
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
        const uint4 q = reinterpret_cast<const device uint4*>(w + row * WPR)[part[it]];
        const int grp = part[it] * 32 / GS;
        acc += static_cast<float>(scales[row * G + grp]) * dot32(q, sh + c * 36)
               + static_cast<float>(biases[row * G + grp]) * hs[it];
      }
    }
    acc = simd_sum(acc);
    if (lane == 0) y[size_t(n) * D + d] = static_cast<OutT>(acc);
  }
"""

_SOURCES = {"cuda": (_CUDA_HEADER, _CUDA_GATE_UP, _CUDA_DOWN),
            "metal": (_METAL_HEADER, _METAL_GATE_UP, _METAL_DOWN)}
_built: dict[str, tuple] = {}


def _get(backend: str):
    """(gate_up kernel, down kernel) on `backend`."""
    if backend == COUNT:
        return StandInKernel(NAME), StandInKernel(NAME)
    if backend not in _built:
        header, gate_up, down = _SOURCES[backend]
        make = mx.fast.cuda_kernel if backend == "cuda" else mx.fast.metal_kernel
        _built[backend] = (
            make(name="tandem_moe_gate_up", input_names=["x", "idx", "w", "scales", "biases"],
                 output_names=["h"], source=gate_up, header=header),
            make(name="tandem_moe_down",
                 input_names=["h", "idx", "scores", "w", "scales", "biases"],
                 output_names=["y"], source=down, header=header))
    return _built[backend]


def _dequantized_rows(parts, idx, group_size: int) -> mx.array:
    """The chosen experts' float32 matrices [N, k, rows, cols] (scale * q + bias in float32:
    bf16 scales would round each weight to bf16)."""
    w, s, b = (p[idx] for p in parts)
    return mx.dequantize(w, s.astype(mx.float32), b.astype(mx.float32), group_size=group_size,
                         bits=4)


def reference(x, idx, scores, experts: QuantExperts) -> mx.array:
    """Plain-mx float32: dequantize the chosen experts and run them. [N, D] in x.dtype."""
    hidden, gs = experts.hidden, experts.group_size
    xf = x.astype(mx.float32)[:, None, :, None]                             # [N, 1, D, 1]
    gu = (_dequantized_rows(experts.gate_up, idx, gs) @ xf)[..., 0]         # [N, k, rows]
    gate, up = gu[..., :hidden], gu[..., hidden:2 * hidden]                 # [N, k, I]
    h = gate * mx.sigmoid(gate) * up                                        # [N, k, I]
    y = (_dequantized_rows(experts.down, idx, gs) @ h[..., None])[..., 0]   # [N, k, D]
    return (scores.astype(mx.float32)[..., None] * y).sum(axis=1).astype(x.dtype)


def applies(x, idx, experts: QuantExperts) -> bool:
    """Shapes and formats the kernel handles; the caller's plain path takes the rest."""
    if x.ndim != 2 or idx.ndim != 2 or idx.shape[0] != x.shape[0]:
        return False
    (N, D), K, hidden, gs = x.shape, idx.shape[1], experts.hidden, experts.group_size
    gw, dw = experts.gate_up[0], experts.down[0]
    return (experts.bits == 4 and experts.mode == "affine" and gs in GROUP_SIZES
            and all(len(p) == 3 and p[2] is not None for p in (experts.gate_up, experts.down))
            and gw.dtype == mx.uint32 and dw.dtype == mx.uint32
            and 1 <= N * K <= MAX_PAIRS and D % 32 == 0 and hidden % 32 == 0
            and D % gs == 0 and hidden % gs == 0 and hidden % RPW1 == 0
            and D % (8 * RPW2) == 0 and K * hidden // 32 * 36 * 4 <= SMEM_BYTES
            and gw.ndim == 3 and gw.shape[2] * 8 == D and gw.shape[1] >= 2 * hidden
            and dw.ndim == 3 and dw.shape[1] == D and dw.shape[2] * 8 == hidden)


def kernel(x, idx, scores, experts: QuantExperts, *, backend: str) -> mx.array:
    """Launch on `backend`: y [N, D] in x.dtype, as `reference`."""
    (N, D), K, hidden, gs = x.shape, idx.shape[1], experts.hidden, experts.group_size
    gate_up, down = _get(backend)
    gw, gsc, gb = experts.gate_up
    (h,) = gate_up(
        inputs=[x, idx, gw, gsc, gb],
        template=[("D", D), ("I", hidden), ("K", K), ("R", gw.shape[1]), ("GS", gs),
                  ("RPW", RPW1)],
        grid=(N * K * (hidden // RPW1) * 32, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(N * K, hidden)], output_dtypes=[mx.float32])
    dw, dsc, db = experts.down
    (y,) = down(
        inputs=[h, idx, scores, dw, dsc, db],
        template=[("OutT", x.dtype), ("D", D), ("I", hidden), ("K", K), ("GS", gs),
                  ("RPW", RPW2)],
        grid=(N * (D // (8 * RPW2)) * 256, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(N, D)], output_dtypes=[x.dtype])
    return y
