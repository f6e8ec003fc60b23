"""Gated DeltaNet prompt chunk: the causal conv over T tokens, its conv state written in
place, q/k normalised: gdn_conv_step (kernels/gdn_conv_step.py) for a chunk.

Per row b (slot s = slots[b], length L = lengths[b] <= T) and channel c of the
C = 2 Hk Dk + Hv Dv conv channels, on the row's timeline Z = [S; x_0 .. x_{L-1}] with
the conv state S = pool[s] [K-1, C] (zero when fresh[b]) and x = qkv[b]:

    y[t, c]  = silu(sum_{j<K} Z[t + j, c] w[c, j])        t < L (depthwise conv, K taps)
    pool[s]  = Z[L .. L+K-2]                             the last K-1 inputs at L
    q, k, v  = y split at Hk Dk, 2 Hk Dk;   q, k per token and head:
    q        = q / sqrt(|q|^2 + eps) * Dk**-0.5,  k = k / sqrt(|k|^2 + eps)

and q, k, v = 0 past L. The model's plain path is a gather of the slots' states, a
concatenate, the conv (with its SiLU), two rms_norms and a scatter of the new states (the
tail at each row's length): six launches a layer, one here. Outputs are contiguous
[B, T, H, D], as gated_delta_chunk reads them.

One warp per (row, head, TT tokens): lane l holds channels c0 + l + 32 i of the head, with
its last K-1 inputs in registers (the window slides token by token), so a head's norm is
one warp sum a token. A warp of the first tile starts from the state, the others from
the K-1 inputs before their tile. Only first-tile warps touch the pool, each its own
channels, reading the state before writing it: no other warp reads the pool, so the
in-place write races with nothing. In-place contract as gdn_conv_step's (the pool is
written through its input pointer; keep the returned pool; evaluate before reading pool
rows; unique slots, padding rows share a scratch slot nobody reads). qkv and the conv
weight may be strided views.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.gated_delta_chunk import _lengths
from kernels.gdn_conv_step import MAX_KERNEL, _fresh_flags
from kernels.kernel_build import KernelBuild, scalar

NAME = "gdn_conv_chunk"
TT = 16               # tokens a warp; at least K - 1 (a later tile's window is inside x)

_CUDA_SOURCE = """
  constexpr int KD = Hk * Dk;                  // q (and k) channels
  constexpr int NH = 2 * Hk + Hv;              // heads: q, k, v
  constexpr int PER = (Dk > Dv ? Dk : Dv) / 32;
  const int B = qkv_shape[0];
  const int T = qkv_shape[1];
  const int tiles = (T + TT - 1) / TT;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= B * NH * tiles) return;          // whole warps
  const int tile = warp % tiles;
  const int h = (warp / tiles) % NH;
  const int b = warp / (tiles * NH);
  const bool is_q = h < Hk, is_k = !is_q && h < 2 * Hk;
  const int D = (is_q || is_k) ? Dk : Dv;
  const int c0 = is_q ? h * Dk : (is_k ? KD + (h - Hk) * Dk : 2 * KD + (h - 2 * Hk) * Dv);
  const int head = is_q ? h : (is_k ? h - Hk : h - 2 * Hk);
  const int H = (is_q || is_k) ? Hk : Hv;
  OutT* out = is_q ? q : (is_k ? k : v);
  const bool zero = fresh[b] != 0;
  const int len = min(int(lengths[b]), T);
  const int t0 = tile * TT;
  const int t1 = min(t0 + TT, T);
  auto* st = const_cast<PoolT*>(pool) + size_t(slots[b]) * pool_strides[0];
  const auto* xr = qkv + size_t(b) * qkv_strides[0];
  const int64_t xt = qkv_strides[1], xc = qkv_strides[2];
  float win[PER][KS - 1];                      // each channel's last K-1 inputs
  float w[PER][KS];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = c0 + lane + 32 * i;
    if (lane + 32 * i >= D) continue;
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      w[i][j] = static_cast<float>(weight[c * weight_strides[0] + j * weight_strides[1]]);
    }
#pragma unroll
    for (int j = 0; j < KS - 1; ++j) {
      const int p = t0 - (KS - 1) + j;         // < 0: the state's (first tile only)
      win[i][j] = p >= 0 ? static_cast<float>(xr[p * xt + c * xc])
                : (zero ? 0.f : static_cast<float>(st[(KS - 1 + p) * pool_strides[1]
                                                      + c * pool_strides[2]]));
    }
  }
  for (int t = t0; t < t1; ++t) {              // warp-uniform: every lane takes each turn
    const size_t o = ((size_t(b) * T + t) * H + head) * D + lane;
    if (t >= len) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        if (lane + 32 * i < D) out[o + 32 * i] = static_cast<OutT>(0.f);
      }
      continue;
    }
    float y[PER];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      y[i] = 0.f;
      if (lane + 32 * i >= D) continue;
      const float xin = static_cast<float>(xr[t * xt + (c0 + lane + 32 * i) * xc]);
      float acc = xin * w[i][KS - 1];
#pragma unroll
      for (int j = 0; j < KS - 1; ++j) acc += win[i][j] * w[i][j];
#pragma unroll
      for (int j = 0; j < KS - 2; ++j) win[i][j] = win[i][j + 1];
      win[i][KS - 2] = xin;
      y[i] = acc / (1.f + __expf(-acc));
      ss += y[i] * y[i];
    }
    float scale = 1.f;
    if (is_q || is_k) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
      scale = rsqrtf(ss + eps[0]) * (is_q ? rsqrtf(float(Dk)) : 1.f);
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      if (lane + 32 * i < D) out[o + 32 * i] = static_cast<OutT>(y[i] * scale);
    }
  }
  if (tile == 0) {                             // the new state: Z[len .. len+K-2]
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int c = c0 + lane + 32 * i;
      if (lane + 32 * i >= D) continue;
      float nxt[KS - 1];
#pragma unroll
      for (int j = 0; j < KS - 1; ++j) {       // every read before the first write
        const int p = len - (KS - 1) + j;
        nxt[j] = p >= 0 ? static_cast<float>(xr[p * xt + c * xc])
               : (zero ? 0.f : static_cast<float>(st[(KS - 1 + p) * pool_strides[1]
                                                     + c * pool_strides[2]]));
      }
#pragma unroll
      for (int j = 0; j < KS - 1; ++j) {
        st[j * pool_strides[1] + c * pool_strides[2]] = static_cast<PoolT>(nxt[j]);
      }
    }
  }
"""

# Same layout for Metal; it cannot run on the Linux machines: the self-test guards it.
_METAL_SOURCE = """
  constexpr int KD = Hk * Dk;
  constexpr int NH = 2 * Hk + Hv;
  constexpr int PER = (Dk > Dv ? Dk : Dv) / 32;
  const int B = qkv_shape[0];
  const int T = qkv_shape[1];
  const int tiles = (T + TT - 1) / TT;
  const int warp = int(thread_position_in_grid.x) / 32;
  const int lane = int(thread_index_in_simdgroup);
  if (warp >= B * NH * tiles) return;
  const int tile = warp % tiles;
  const int h = (warp / tiles) % NH;
  const int b = warp / (tiles * NH);
  const bool is_q = h < Hk, is_k = !is_q && h < 2 * Hk;
  const int D = (is_q || is_k) ? Dk : Dv;
  const int c0 = is_q ? h * Dk : (is_k ? KD + (h - Hk) * Dk : 2 * KD + (h - 2 * Hk) * Dv);
  const int head = is_q ? h : (is_k ? h - Hk : h - 2 * Hk);
  const int H = (is_q || is_k) ? Hk : Hv;
  const bool zero = fresh[b] != 0;
  const int len = metal::min(int(lengths[b]), T);
  const int t0 = tile * TT;
  const int t1 = metal::min(t0 + TT, T);
  auto st = const_cast<device PoolT*>(pool) + size_t(slots[b]) * pool_strides[0];
  auto xr = qkv + size_t(b) * qkv_strides[0];
  const int64_t xt = qkv_strides[1], xc = qkv_strides[2];
  float win[PER][KS - 1];
  float w[PER][KS];
  for (int i = 0; i < PER; ++i) {
    const int c = c0 + lane + 32 * i;
    if (lane + 32 * i >= D) continue;
    for (int j = 0; j < KS; ++j) {
      w[i][j] = static_cast<float>(weight[c * weight_strides[0] + j * weight_strides[1]]);
    }
    for (int j = 0; j < KS - 1; ++j) {
      const int p = t0 - (KS - 1) + j;
      win[i][j] = p >= 0 ? static_cast<float>(xr[p * xt + c * xc])
                : (zero ? 0.0f : static_cast<float>(st[(KS - 1 + p) * pool_strides[1]
                                                       + c * pool_strides[2]]));
    }
  }
  for (int t = t0; t < t1; ++t) {
    const size_t o = ((size_t(b) * T + t) * H + head) * D + lane;
    float y[PER];
    float ss = 0.0f;
    for (int i = 0; i < PER; ++i) {
      y[i] = 0.0f;
      if (t >= len || lane + 32 * i >= D) continue;
      const float xin = static_cast<float>(xr[t * xt + (c0 + lane + 32 * i) * xc]);
      float acc = xin * w[i][KS - 1];
      for (int j = 0; j < KS - 1; ++j) acc += win[i][j] * w[i][j];
      for (int j = 0; j < KS - 2; ++j) win[i][j] = win[i][j + 1];
      win[i][KS - 2] = xin;
      y[i] = acc / (1.0f + metal::exp(-acc));
      ss += y[i] * y[i];
    }
    float scale = 1.0f;
    if ((is_q || is_k) && t < len) {
      ss = simd_sum(ss);
      scale = metal::rsqrt(ss + eps[0]) * (is_q ? metal::rsqrt(float(Dk)) : 1.0f);
    }
    for (int i = 0; i < PER; ++i) {
      if (lane + 32 * i < D) {
        const OutT val = static_cast<OutT>(y[i] * scale);
        if (is_q) q[o + 32 * i] = val; else if (is_k) k[o + 32 * i] = val; else v[o + 32 * i] = val;
      }
    }
  }
  if (tile == 0) {
    for (int i = 0; i < PER; ++i) {
      const int c = c0 + lane + 32 * i;
      if (lane + 32 * i >= D) continue;
      float nxt[KS - 1];
      for (int j = 0; j < KS - 1; ++j) {
        const int p = len - (KS - 1) + j;
        nxt[j] = p >= 0 ? static_cast<float>(xr[p * xt + c * xc])
               : (zero ? 0.0f : static_cast<float>(st[(KS - 1 + p) * pool_strides[1]
                                                      + c * pool_strides[2]]));
      }
      for (int j = 0; j < KS - 1; ++j) {
        st[j * pool_strides[1] + c * pool_strides[2]] = static_cast<PoolT>(nxt[j]);
      }
    }
  }
"""

_INPUTS = ["qkv", "weight", "pool", "slots", "fresh", "lengths", "eps"]
_OUTPUTS = ["q", "k", "v"]
_KERNEL = KernelBuild(NAME, "tandem_gdn_conv_chunk", _INPUTS, _OUTPUTS, _CUDA_SOURCE,
                      _METAL_SOURCE, row_contiguous=False)
def reference(qkv, weight, pool, slots, fresh, lengths, heads: tuple[int, int, int, int],
              eps: float):
    """Plain-mx float32. qkv [B, T, C]; weight [C, K, 1]; pool [S, K-1, C]; heads (Hk, Hv,
    Dk, Dv). Returns ((q, k [B, T, Hk, Dk], v [B, T, Hv, Dv]) in qkv's dtype, zero past
    each row's length) and the slots' new states [B, K-1, C] in the pool's dtype."""
    Hk, Hv, Dk, Dv = heads
    B, T, _ = qkv.shape
    K = weight.shape[1]
    lens = _lengths(lengths, B, T)
    old = pool[slots].astype(mx.float32)                                     # [B, K-1, C]
    if fresh is not None:
        old = mx.where(fresh.astype(mx.bool_)[:, None, None], 0.0, old)
    z = mx.concatenate([old, qkv.astype(mx.float32)], axis=1)                # [B, K-1+T, C]
    w = weight[:, :, 0].T.astype(mx.float32)                                 # [K, C]
    y = sum(z[:, j:j + T] * w[j] for j in range(K))                          # [B, T, C]
    y = y * mx.sigmoid(y)
    kd = Hk * Dk
    q, k = (y[..., a:a + kd].reshape(B, T, Hk, Dk) for a in (0, kd))
    v = y[..., 2 * kd:].reshape(B, T, Hv, Dv)
    q = q * mx.rsqrt((q * q).sum(-1, keepdims=True) + eps) * Dk ** -0.5
    k = k * mx.rsqrt((k * k).sum(-1, keepdims=True) + eps)
    live = (mx.arange(T)[None, :] < lens[:, None])[:, :, None, None]          # [B, T, 1, 1]
    outs = tuple(mx.where(live, a, 0.0).astype(qkv.dtype) for a in (q, k, v))
    tail = mx.take_along_axis(z, (lens[:, None] + mx.arange(K - 1))[..., None], axis=1)
    return outs, tail.astype(pool.dtype)


def applies(qkv, weight, pool, heads: tuple[int, int, int, int]) -> bool:
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    K = weight.shape[1] if weight.ndim == 3 else 0
    return (qkv.ndim == 3 and qkv.shape[-1] == C and weight.shape == (C, K, 1)
            and 2 <= K <= min(MAX_KERNEL, TT + 1) and pool.ndim == 3
            and pool.shape[1:] == (K - 1, C) and Dk % 32 == 0 and Dv % 32 == 0)


def kernel(qkv, weight, pool, slots, fresh, lengths, heads: tuple[int, int, int, int],
           eps: float, *, backend: str):
    """Launch: (q, k, v) as `reference`; the slots' new states are written into the pool
    in place when evaluated (module contract)."""
    Hk, Hv, Dk, Dv = heads
    B, T, _ = qkv.shape
    tiles = -(-T // TT)
    return _KERNEL.get(backend)(
        inputs=[qkv, weight, pool, slots.astype(mx.int32), _fresh_flags(fresh, B),
                _lengths(lengths, B, T), scalar(float(eps))],
        template=[("OutT", qkv.dtype), ("PoolT", pool.dtype), ("Hk", Hk), ("Hv", Hv),
                  ("Dk", Dk), ("Dv", Dv), ("KS", weight.shape[1]), ("TT", TT)],
        grid=(B * (2 * Hk + Hv) * tiles * 32, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(B, T, Hk, Dk), (B, T, Hk, Dk), (B, T, Hv, Dv)],
        output_dtypes=[qkv.dtype] * 3)
