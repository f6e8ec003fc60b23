"""Gated attention at decode, before the attention itself: q/k norms, rotary, K/V into the pools.

Per row b (position p = offsets[b], pool row s = slots[b]) of the joined projection's
views q [B, Hq*QH] (head h's D values at h*QH: QH = 2D when each head's output gate
follows its q, as in Qwen3.5's q_proj), k, v [B, Hkv*D]:

    q_h = rope(rms_norm(q_h) * q_norm, p)          -> out q [B, Hq, D]
    k_h = rope(rms_norm(k_h) * k_norm, p)          -> k_pool[s, h]   (in place)
    v_h                                            -> v_pool[s, h]   (in place)

Without q/k norms (q_norm = k_norm = None: NORM=0, the llama family's attention) the
heads are only roped. With kv_columns (KC, VC), k and v are the joined projection itself
(q at its column 0), their heads read from those columns: no Split node before the launch.

rope is MLX's non-traditional rotary embedding of the first RD dims (pairs i, i + RD/2
rotated by p * base**(-2i/RD), computed as mx.fast.rope computes it on CUDA: the angle's
inverse frequency exp2(-(i / (RD/2)) * log2(base)) in float32); dims past RD pass through.

The model's plain path is two mx.fast.rms_norm, two mx.fast.rope and two scatters into
the K and V pools: six launches an attention layer, one here. The scatters were the
slowest of them (21.7 us each at B=1 on the H200, docs/bench/HISTORY.md).

In-place contract (as kernels/gated_delta_step.py): MLX custom kernels cannot alias an
output onto an input, so the pools are written through their input pointers; they must
be materialised arrays (any strides); keep the returned pools (they depend on q); the
pools' reader in the step must take q (the paged kernel does: on a GPU only a consumed
output orders a reader after the write, kernels/README.md "Ordering on a GPU", so
KernelSet runs this kernel only where the paged kernel reads the pools); evaluate before
reading pool rows on the host; slots unique but for padding rows, which share a scratch
row nobody reads.
q, k, v and the norm weights are read through their strides.

One warp (simdgroup) per (row, head) of Hq + 2 Hkv heads; a head's norm is one warp sum.
"""
from __future__ import annotations

import math

import mlx.core as mx

from kernels.kernel_build import KernelBuild, scalar

NAME = "attention_prep"

_CUDA_SOURCE = """
  constexpr int NH = Hq + 2 * Hkv;
  constexpr int HALF = RD / 2;
  const int B = q_shape[0];
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= B * NH) return;                  // whole warps
  const int b = warp / NH;
  const int h = warp % NH;
  const int64_t slot = slots[b * slots_strides[0]];
  if (h >= Hq + Hkv) {                         // v: copied into its pool row
    const int hv = h - Hq - Hkv;
    const auto* src = v + b * v_strides[0] + (VC + int64_t(hv) * D) * v_strides[1];
    auto* dst = const_cast<PoolT*>(v_pool) + slot * v_pool_strides[0] + hv * v_pool_strides[1];
    for (int i = lane; i < D; i += 32) {
      dst[i * v_pool_strides[2]] = static_cast<PoolT>(src[i * v_strides[1]]);
    }
    return;
  }
  const bool is_q = h < Hq;
  const int hh = is_q ? h : h - Hq;
  const auto* src = is_q ? q + b * q_strides[0] + int64_t(hh) * QH * q_strides[1]
                         : k + b * k_strides[0] + (KC + int64_t(hh) * D) * k_strides[1];
  const int64_t es = is_q ? q_strides[1] : k_strides[1];
  const auto* w = is_q ? q_norm : k_norm;
  const int64_t ws = is_q ? q_norm_strides[0] : k_norm_strides[0];
  float ss = 0.f;
  for (int i = lane; i < D; i += 32) {
    const float x = static_cast<float>(src[i * es]);
    ss += x * x;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float inv = NORM ? rsqrtf(ss / D + eps[0]) : 1.f;
  const float pos = static_cast<float>(offsets[b * offsets_strides[0]]);
  // q to its dense output row; k straight into its pool row
  OutT* qd = q_out + (int64_t(b) * Hq + hh) * D;
  PoolT* kd = const_cast<PoolT*>(k_pool) + slot * k_pool_strides[0] + hh * k_pool_strides[1];
  const int64_t kds = k_pool_strides[2];
  for (int i = lane; i < HALF; i += 32) {
    const float x1 = static_cast<float>(src[i * es]) * inv
                     * (NORM ? static_cast<float>(w[i * ws]) : 1.f);
    const float x2 = static_cast<float>(src[(i + HALF) * es]) * inv
                     * (NORM ? static_cast<float>(w[(i + HALF) * ws]) : 1.f);
    const float inv_freq = exp2f(-(static_cast<float>(i) / static_cast<float>(HALF)) * log2_base[0]);
    const float theta = pos * inv_freq;
    const float c = cosf(theta), s = sinf(theta);
    const float r1 = x1 * c - x2 * s, r2 = x1 * s + x2 * c;
    if (is_q) { qd[i] = static_cast<OutT>(r1); qd[i + HALF] = static_cast<OutT>(r2); }
    else { kd[i * kds] = static_cast<PoolT>(r1); kd[(i + HALF) * kds] = static_cast<PoolT>(r2); }
  }
  for (int i = RD + lane; i < D; i += 32) {
    const float x = static_cast<float>(src[i * es]) * inv
                    * (NORM ? static_cast<float>(w[i * ws]) : 1.f);
    if (is_q) qd[i] = static_cast<OutT>(x); else kd[i * kds] = static_cast<PoolT>(x);
  }
"""

# Same layout for Metal; it cannot run on the Linux machines: the self-test guards it.
# precise::cos/sin: the angle reaches p radians (hundreds of thousands at long contexts).
_METAL_SOURCE = """
  constexpr int NH = Hq + 2 * Hkv;
  constexpr int HALF = RD / 2;
  const int B = q_shape[0];
  const int warp = int(thread_position_in_grid.x) / 32;
  const int lane = int(thread_index_in_simdgroup);
  if (warp >= B * NH) return;
  const int b = warp / NH;
  const int h = warp % NH;
  const int64_t slot = slots[b * slots_strides[0]];
  if (h >= Hq + Hkv) {
    const int hv = h - Hq - Hkv;
    auto src = v + b * v_strides[0] + (VC + int64_t(hv) * D) * v_strides[1];
    auto dst = const_cast<device PoolT*>(v_pool) + slot * v_pool_strides[0]
               + hv * v_pool_strides[1];
    for (int i = lane; i < D; i += 32) {
      dst[i * v_pool_strides[2]] = static_cast<PoolT>(src[i * v_strides[1]]);
    }
    return;
  }
  const bool is_q = h < Hq;
  const int hh = is_q ? h : h - Hq;
  auto src = is_q ? q + b * q_strides[0] + int64_t(hh) * QH * q_strides[1]
                  : k + b * k_strides[0] + (KC + int64_t(hh) * D) * k_strides[1];
  const int64_t es = is_q ? q_strides[1] : k_strides[1];
  auto w = is_q ? q_norm : k_norm;
  const int64_t ws = is_q ? q_norm_strides[0] : k_norm_strides[0];
  float ss = 0.0f;
  for (int i = lane; i < D; i += 32) {
    const float x = static_cast<float>(src[i * es]);
    ss += x * x;
  }
  ss = simd_sum(ss);
  const float inv = NORM ? metal::rsqrt(ss / D + eps[0]) : 1.0f;
  const float pos = static_cast<float>(offsets[b * offsets_strides[0]]);
  device OutT* qd = q_out + (int64_t(b) * Hq + hh) * D;
  device PoolT* kd = const_cast<device PoolT*>(k_pool) + slot * k_pool_strides[0]
                     + hh * k_pool_strides[1];
  const int64_t kds = k_pool_strides[2];
  for (int i = lane; i < HALF; i += 32) {
    const float x1 = static_cast<float>(src[i * es]) * inv
                     * (NORM ? static_cast<float>(w[i * ws]) : 1.0f);
    const float x2 = static_cast<float>(src[(i + HALF) * es]) * inv
                     * (NORM ? static_cast<float>(w[(i + HALF) * ws]) : 1.0f);
    const float inv_freq = metal::exp2(-(float(i) / float(HALF)) * log2_base[0]);
    const float theta = pos * inv_freq;
    const float c = metal::precise::cos(theta), s = metal::precise::sin(theta);
    const float r1 = x1 * c - x2 * s, r2 = x1 * s + x2 * c;
    if (is_q) { qd[i] = static_cast<OutT>(r1); qd[i + HALF] = static_cast<OutT>(r2); }
    else { kd[i * kds] = static_cast<PoolT>(r1); kd[(i + HALF) * kds] = static_cast<PoolT>(r2); }
  }
  for (int i = RD + lane; i < D; i += 32) {
    const float x = static_cast<float>(src[i * es]) * inv
                    * (NORM ? static_cast<float>(w[i * ws]) : 1.0f);
    if (is_q) qd[i] = static_cast<OutT>(x); else kd[i * kds] = static_cast<PoolT>(x);
  }
"""

_INPUTS = ["q", "k", "v", "q_norm", "k_norm", "offsets", "slots", "k_pool", "v_pool", "eps",
           "log2_base"]
_OUTPUTS = ["q_out"]
_KERNEL = KernelBuild(NAME, "tandem_attention_prep", _INPUTS, _OUTPUTS, _CUDA_SOURCE, _METAL_SOURCE,
                      row_contiguous=False)


def _get(backend: str):
    return _KERNEL.get(backend)


_no_norms: dict[tuple, mx.array] = {}


def _no_norm(D: int, dtype: mx.Dtype) -> mx.array:
    """A norm weight for NORM=0 launches (unread), one per shape: a constant, not an op
    per step."""
    if (D, dtype) not in _no_norms:
        _no_norms[(D, dtype)] = mx.ones((D,), dtype)
        mx.eval(_no_norms[(D, dtype)])
    return _no_norms[(D, dtype)]


def _heads(x: mx.array, H: int, stride: int, D: int) -> mx.array:
    """[B, H*stride] -> head h's first D values [B, H, D]."""
    return x.reshape(x.shape[0], H, stride)[..., :D]


def rope(x: mx.array, pos: mx.array, rotary_dim: int, base: float) -> mx.array:
    """float32 non-traditional rotary embedding of x [B, H, D] at positions pos [B], the
    angles as MLX's CUDA rope computes them."""
    half = rotary_dim // 2
    d = mx.arange(half, dtype=mx.float32) / half
    inv_freq = mx.power(mx.array(2.0, mx.float32),
                        -d * mx.array(math.log2(base), mx.float32))                 # [half]
    theta = pos.astype(mx.float32)[:, None, None] * inv_freq                         # [B, 1, half]
    c, s = mx.cos(theta), mx.sin(theta)
    x1, x2, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return mx.concatenate([x1 * c - x2 * s, x1 * s + x2 * c, rest], axis=-1)


def reference(q, k, v, q_norm, k_norm, eps: float, offsets, slots, k_pool, v_pool,
              heads: tuple[int, int, int, int], rotary_dim: int, base: float,
              kv_columns: tuple[int, int] | None = None):
    """Plain-mx float32. heads (Hq, Hkv, D, QH); q_norm = k_norm = None: no norms.
    Returns (q [B, Hq, D] in q's dtype, k rows, v rows [B, Hkv, D] in the pools' dtype:
    what the kernel writes at slots). kv_columns: as `kernel`."""
    Hq, Hkv, D, QH = heads
    q = q[:, :Hq * QH]                             # q may be the start of a wider row
    if kv_columns is not None:
        kc, vc = kv_columns
        k, v = k[:, kc:kc + Hkv * D], v[:, vc:vc + Hkv * D]

    def normed(x, w):
        x = x.astype(mx.float32)
        if w is None:
            return x
        return x * mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(mx.float32)

    qh = rope(normed(_heads(q, Hq, QH, D), q_norm), offsets, rotary_dim, base)
    kh = rope(normed(_heads(k, Hkv, D, D), k_norm), offsets, rotary_dim, base)
    return (qh.astype(q.dtype), kh.astype(k_pool.dtype),
            _heads(v, Hkv, D, D).astype(v_pool.dtype))


def applies(q, k, v, q_norm, k_norm, k_pool, v_pool, heads: tuple[int, int, int, int],
            rotary_dim: int, kv_columns: tuple[int, int] | None = None) -> bool:
    Hq, Hkv, D, QH = heads
    if kv_columns is None:
        kv_ok = k.shape[-1] == v.shape[-1] == Hkv * D
    else:                           # k, v: the joined projection, their heads at columns
        kc, vc = kv_columns
        kv_ok = (min(kv_columns) >= Hq * QH and k.shape[-1] >= kc + Hkv * D
                 and v.shape[-1] >= vc + Hkv * D)
    norms_ok = (q_norm is None and k_norm is None) or (
        q_norm is not None and k_norm is not None and q_norm.dtype == k_norm.dtype
        and q_norm.shape == k_norm.shape == (D,))
    return (q.ndim == k.ndim == v.ndim == 2 and q.shape[0] == k.shape[0] == v.shape[0]
            and q.shape[1] >= Hq * QH and QH >= D and kv_ok
            and q.dtype == k.dtype == v.dtype and norms_ok
            and k_pool.ndim == 3 and k_pool.shape[1:] == (Hkv, D)
            and v_pool.shape == k_pool.shape and k_pool.dtype == v_pool.dtype
            and 0 < rotary_dim <= D and rotary_dim % 2 == 0)


def kernel(q, k, v, q_norm, k_norm, eps: float, offsets, slots, k_pool, v_pool,
           heads: tuple[int, int, int, int], rotary_dim: int, base: float, *, backend: str,
           kv_columns: tuple[int, int] | None = None):
    """Launch: q [B, Hq, D] as `reference`; the new K/V rows are written into the pools at
    slots in place when evaluated (module contract). q_norm = k_norm = None: no norms
    (NORM=0; the kernel reads a placeholder it never uses). kv_columns (KC, VC): k and v
    are the joined projection, read from those columns."""
    Hq, Hkv, D, QH = heads
    kc, vc = kv_columns or (0, 0)
    B = q.shape[0]
    norm = q_norm is not None
    if not norm:
        q_norm = k_norm = _no_norm(D, q.dtype)
    (q_out,) = _get(backend)(
        inputs=[q, k, v, q_norm, k_norm, offsets.astype(mx.int32), slots.astype(mx.int32),
                k_pool, v_pool, scalar(float(eps)), scalar(math.log2(base))],
        template=[("OutT", q.dtype), ("PoolT", k_pool.dtype), ("Hq", Hq), ("Hkv", Hkv),
                  ("D", D), ("QH", QH), ("RD", rotary_dim), ("NORM", int(norm)),
                  ("KC", kc), ("VC", vc)],
        grid=(B * (Hq + 2 * Hkv) * 32, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(B, Hq, D)], output_dtypes=[q.dtype])
    return q_out
