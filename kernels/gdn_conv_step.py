"""Gated DeltaNet decode: the causal conv step, its conv state written in place, q/k normalised.

Per row b (slot s = slots[b]), channel c of the C = 2 Hk Dk + Hv Dv conv channels, with
the conv state S = pool[s] [K-1, C] (zero when fresh[b]) and the new input x = qkv[b]:

    y[c]      = silu(sum_{j<K-1} S[j, c] w[c, j] + x[c] w[c, K-1])     # depthwise conv, K taps
    pool[s]   = [S[1:], x]                                          # the last K-1 inputs
    q, k, v   = y split at Hk Dk, 2 Hk Dk;   q, k per head:
    q         = q / sqrt(|q|^2 + eps) * Dk**-0.5,  k = k / sqrt(|k|^2 + eps)

The model's plain path is a gather of the slots' states, a concatenate, the conv, the
SiLU, a scatter of the new states (which copies the whole pool: the gather still holds
its buffer; 21.7 us a call at B=1 on the H200), two rms_norms and the copies that make
q, k, v contiguous for the recurrence kernel: eight launches or more a layer, one here.
The outputs are the contiguous [B, H, D] arrays the gated delta step kernel reads.

In-place contract (as kernels/gated_delta_step.py): the pool is materialised and is
written through its input pointer; keep the returned pool (it depends on the outputs);
evaluate before reading pool rows; slots unique (padding rows share a scratch slot,
whose contents nobody reads). qkv and the conv weight may be strided views (a slice of
the joined input projection; a checkpoint's weight moved to MLX's layout): the kernel
reads their strides.

One warp per (row, head): lane l holds channels c0 + l + 32 i of the head (coalesced),
so a head's norm is one warp sum.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild, scalar

NAME = "gdn_conv_step"
MAX_KERNEL = 8        # conv taps the kernel keeps in registers

_CUDA_SOURCE = """
  constexpr int KD = Hk * Dk;                  // q (and k) channels
  constexpr int NH = 2 * Hk + Hv;              // heads: q, k, v
  const int B = qkv_shape[0];
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= B * NH) return;                  // whole warps
  const int b = warp / NH;
  const int h = warp % NH;
  const bool is_q = h < Hk, is_k = !is_q && h < 2 * Hk;
  const int D = (is_q || is_k) ? Dk : Dv;
  const int c0 = is_q ? h * Dk : (is_k ? KD + (h - Hk) * Dk : 2 * KD + (h - 2 * Hk) * Dv);
  const bool zero = fresh[b] != 0;
  auto* st = const_cast<PoolT*>(pool) + size_t(slots[b]) * pool_strides[0];
  const size_t xrow = size_t(b) * qkv_strides[0];
  constexpr int PER = (Dk > Dv ? Dk : Dv) / 32;
  float y[PER];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int c = c0 + lane + 32 * i;
    if (lane + 32 * i >= D) { y[i] = 0.f; continue; }
    float old[KS - 1];
#pragma unroll
    for (int j = 0; j < KS - 1; ++j) {
      old[j] = zero ? 0.f : static_cast<float>(st[j * pool_strides[1] + c * pool_strides[2]]);
    }
    const auto xin = qkv[xrow + c * qkv_strides[qkv_ndim - 1]];
    const auto* wc = weight + c * weight_strides[0];
    float acc = static_cast<float>(xin) * static_cast<float>(wc[(KS - 1) * weight_strides[1]]);
#pragma unroll
    for (int j = 0; j < KS - 1; ++j) acc += old[j] * static_cast<float>(wc[j * weight_strides[1]]);
#pragma unroll
    for (int j = 0; j < KS - 2; ++j) {
      st[j * pool_strides[1] + c * pool_strides[2]] = static_cast<PoolT>(old[j + 1]);
    }
    st[(KS - 2) * pool_strides[1] + c * pool_strides[2]] = static_cast<PoolT>(xin);
    y[i] = acc / (1.f + __expf(-acc));
    ss += y[i] * y[i];
  }
  float scale = 1.f;
  if (is_q || is_k) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    scale = rsqrtf(ss + eps[0]) * (is_q ? rsqrtf(float(Dk)) : 1.f);
  }
  OutT* out = is_q ? q : (is_k ? k : v);
  const int head = is_q ? h : (is_k ? h - Hk : h - 2 * Hk);
  const int H = (is_q || is_k) ? Hk : Hv;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    if (lane + 32 * i < D) {
      out[(size_t(b) * H + head) * D + lane + 32 * i] = static_cast<OutT>(y[i] * scale);
    }
  }
"""

# Same layout for Metal; it cannot run on the Linux machines: the self-test guards it.
_METAL_SOURCE = """
  constexpr int KD = Hk * Dk;
  constexpr int NH = 2 * Hk + Hv;
  const int B = qkv_shape[0];
  const int warp = int(thread_position_in_grid.x) / 32;
  const int lane = int(thread_index_in_simdgroup);
  if (warp >= B * NH) return;
  const int b = warp / NH;
  const int h = warp % NH;
  const bool is_q = h < Hk, is_k = !is_q && h < 2 * Hk;
  const int D = (is_q || is_k) ? Dk : Dv;
  const int c0 = is_q ? h * Dk : (is_k ? KD + (h - Hk) * Dk : 2 * KD + (h - 2 * Hk) * Dv);
  const bool zero = fresh[b] != 0;
  auto st = const_cast<device PoolT*>(pool) + size_t(slots[b]) * pool_strides[0];
  const size_t xrow = size_t(b) * qkv_strides[0];
  constexpr int PER = (Dk > Dv ? Dk : Dv) / 32;
  float y[PER];
  float ss = 0.0f;
  for (int i = 0; i < PER; ++i) {
    const int c = c0 + lane + 32 * i;
    if (lane + 32 * i >= D) { y[i] = 0.0f; continue; }
    float old[KS - 1];
    for (int j = 0; j < KS - 1; ++j) {
      old[j] = zero ? 0.0f : static_cast<float>(st[j * pool_strides[1] + c * pool_strides[2]]);
    }
    const auto xin = qkv[xrow + c * qkv_strides[qkv_ndim - 1]];
    auto wc = weight + c * weight_strides[0];
    float acc = static_cast<float>(xin) * static_cast<float>(wc[(KS - 1) * weight_strides[1]]);
    for (int j = 0; j < KS - 1; ++j) acc += old[j] * static_cast<float>(wc[j * weight_strides[1]]);
    for (int j = 0; j < KS - 2; ++j) {
      st[j * pool_strides[1] + c * pool_strides[2]] = static_cast<PoolT>(old[j + 1]);
    }
    st[(KS - 2) * pool_strides[1] + c * pool_strides[2]] = static_cast<PoolT>(xin);
    y[i] = acc / (1.0f + metal::exp(-acc));
    ss += y[i] * y[i];
  }
  float scale = 1.0f;
  if (is_q || is_k) {
    ss = simd_sum(ss);
    scale = metal::rsqrt(ss + eps[0]) * (is_q ? metal::rsqrt(float(Dk)) : 1.0f);
  }
  const int head = is_q ? h : (is_k ? h - Hk : h - 2 * Hk);
  const int H = (is_q || is_k) ? Hk : Hv;
  for (int i = 0; i < PER; ++i) {
    if (lane + 32 * i < D) {
      const size_t o = (size_t(b) * H + head) * D + lane + 32 * i;
      const OutT val = static_cast<OutT>(y[i] * scale);
      if (is_q) q[o] = val; else if (is_k) k[o] = val; else v[o] = val;
    }
  }
"""

_INPUTS = ["qkv", "weight", "pool", "slots", "fresh", "eps"]
_OUTPUTS = ["q", "k", "v"]
_KERNEL = KernelBuild(NAME, "tandem_gdn_conv_step", _INPUTS, _OUTPUTS, _CUDA_SOURCE, _METAL_SOURCE,
                      row_contiguous=False)


def _get(backend: str):
    return _KERNEL.get(backend)


_no_fresh: dict[int, mx.array] = {}


def _fresh_flags(fresh: mx.array | None, batch: int) -> mx.array:
    if fresh is None:       # decode: a constant per batch size, not an op per step
        if batch not in _no_fresh:
            _no_fresh[batch] = mx.zeros((batch,), dtype=mx.int32)
            mx.eval(_no_fresh[batch])
        return _no_fresh[batch]
    return fresh.astype(mx.int32)


def reference(qkv, weight, pool, slots, fresh, heads: tuple[int, int, int, int], eps: float):
    """Plain-mx float32. qkv [B, C] (or [B, 1, C]; or wider: its first C columns); weight
    [C, K, 1]; pool [S, K-1, C]; heads (Hk, Hv, Dk, Dv). Returns (q [B, Hk, Dk], k [B, Hk, Dk], v [B, Hv, Dv]) in qkv's
    dtype and the slots' new states [B, K-1, C] in the pool's dtype."""
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    x = qkv.reshape(qkv.shape[0], -1)[:, :C].astype(mx.float32)             # [B, C]
    old = pool[slots].astype(mx.float32)                                     # [B, K-1, C]
    if fresh is not None:
        old = mx.where(fresh.astype(mx.bool_)[:, None, None], 0.0, old)
    window = mx.concatenate([old, x[:, None, :]], axis=1)                    # [B, K, C]
    y = (window * weight[:, :, 0].T.astype(mx.float32)).sum(axis=1)          # [B, C]
    y = y * mx.sigmoid(y)
    B, kd = y.shape[0], Hk * Dk
    q, k, v = y[:, :kd], y[:, kd:2 * kd], y[:, 2 * kd:]
    q, k = (a.reshape(B, Hk, Dk) for a in (q, k))
    q = q * mx.rsqrt((q * q).sum(-1, keepdims=True) + eps) * Dk ** -0.5
    k = k * mx.rsqrt((k * k).sum(-1, keepdims=True) + eps)
    outs = tuple(a.astype(qkv.dtype) for a in (q, k, v.reshape(B, Hv, Dv)))
    return outs, window[:, 1:].astype(pool.dtype)


def applies(qkv, weight, pool, heads: tuple[int, int, int, int]) -> bool:
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    if qkv.ndim == 3 and qkv.shape[1] != 1:
        return False
    K = weight.shape[1] if weight.ndim == 3 else 0
    # qkv may be wider: the joined input projection, whose first C columns are qkv (the
    # kernel reads columns 0..C-1 through the strides: no Split node before it)
    return (qkv.ndim in (2, 3) and qkv.shape[-1] >= C and weight.shape == (C, K, 1)
            and 2 <= K <= MAX_KERNEL and pool.ndim == 3 and pool.shape[1:] == (K - 1, C)
            and Dk % 32 == 0 and Dv % 32 == 0)


def kernel(qkv, weight, pool, slots, fresh, heads: tuple[int, int, int, int], eps: float,
           *, backend: str):
    """Launch: (q, k, v) as `reference`; the slots' new states are written into the pool
    in place when evaluated (module contract)."""
    Hk, Hv, Dk, Dv = heads
    B = qkv.shape[0]
    return _get(backend)(
        inputs=[qkv, weight, pool, slots.astype(mx.int32),
                _fresh_flags(fresh, B), scalar(float(eps))],
        template=[("OutT", qkv.dtype), ("PoolT", pool.dtype), ("Hk", Hk), ("Hv", Hv),
                  ("Dk", Dk), ("Dv", Dv), ("KS", weight.shape[1])],
        grid=(B * (2 * Hk + Hv) * 32, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(B, Hk, Dk), (B, Hk, Dk), (B, Hv, Dv)],
        output_dtypes=[qkv.dtype] * 3)
