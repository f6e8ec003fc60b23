"""Gated DeltaNet prefill: the recurrence over T tokens, token loop inside the kernel.

Same update as `gated_delta_step` (g is the exp'd decay, or with `decay` the raw a as
there), applied token by token for B rows of T tokens each, right-padded: row b runs its first
lengths[b] tokens; padded tokens leave the state unchanged and give y = 0.
The state of each row is read from pool[slots[b]] (zero when fresh[b]),
stays in registers for the whole chunk and is written back into the same
place: the pool is updated in place under the contract in gated_delta_step's
docstring (materialised pool with unit-stride last axis; use the returned
pool and evaluate before reading rows; unique slots).
q/k/v may be bf16/f16/f32 views of any strides; all arithmetic is float32.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.gated_delta_step import (
    CUDA_HEADER,
    _fresh_flags,
    _no_decay,
    gather_states,
    pick_lanes,
    raw_gates,
    step_math,
)
from kernels.kernel_build import KernelBuild

NAME = "gated_delta_chunk"

# One state row per LPR lanes as in the step kernel. The next token's q/k/v/g/
# beta are loaded before the current token's math so their latency overlaps it.
_CUDA_SOURCE = """
  constexpr int E = Dk / LPR;
  constexpr int C = E / 4;
  const int B = q_shape[0];
  const int T = q_shape[1];
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = tid / LPR;                 // (b * Hv + hv) * Dv + dv
  const int lane = tid % LPR;
  if (row >= B * Hv * Dv) return;            // whole warps only: Dv*LPR % 32 == 0
  const int n = row / Dv;
  const int hv = n % Hv;
  const int b = n / Hv;
  const int hk = hv / (Hv / Hk);
  const int dv = row % Dv;
  const int len = min(int(lengths[b]), T);
  // In place: the pool is declared an input but this row is written back at the end.
  float* s_io = const_cast<float*>(pool) + slots[b] * pool_strides[0] + hv * pool_strides[1]
                + dv * pool_strides[2];
  // q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], g, beta [B, T, Hv]: read through their strides
  // (views of the conv's output and of the projection: no copies before the launch).
  const auto* qp = q + b * q_strides[0] + hk * q_strides[2];
  const auto* kp = k + b * k_strides[0] + hk * k_strides[2];
  const auto* vp = v + b * v_strides[0] + hv * v_strides[2] + dv * v_strides[3];
  const auto* gp = g + b * g_strides[0] + hv * g_strides[2];
  const auto* bp = beta + b * beta_strides[0] + hv * beta_strides[2];
  // GATES: g holds a, beta holds b (the raw projections); the decay and the write
  // strength from them as gated_delta_step does, per token, in registers.
  const float ea = GATES ? expf(static_cast<float>(a_log[hv])) : 0.f;
  const float dtb = GATES ? static_cast<float>(dt_bias[hv]) : 0.f;
  auto* yp = y + (size_t(b) * T * Hv + hv) * Dv + dv;
  const bool zero = fresh[b] != 0;

  float st[E], kk[E], qq[E];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int e0 = (c * LPR + lane) * 4;
    float4 s4 = zero ? make_float4(0.f, 0.f, 0.f, 0.f)
                     : *reinterpret_cast<const float4*>(s_io + e0);
    st[4 * c + 0] = s4.x; st[4 * c + 1] = s4.y; st[4 * c + 2] = s4.z; st[4 * c + 3] = s4.w;
  }
  float vt = 0.f, gt = 0.f, bt = 0.f;
  if (len > 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = (c * LPR + lane) * 4 + j;
        kk[4 * c + j] = static_cast<float>(kp[e * k_strides[3]]);
        qq[4 * c + j] = static_cast<float>(qp[e * q_strides[3]]);
      }
    }
    vt = static_cast<float>(vp[0]); gt = static_cast<float>(gp[0]); bt = static_cast<float>(bp[0]);
  }
  for (int t = 0; t < len; ++t) {
    float nk[E], nq[E];
    float nv = 0.f, ng = 0.f, nb = 0.f;
    if (t + 1 < len) {
      const int64_t ok = (t + 1) * k_strides[1], oq = (t + 1) * q_strides[1];
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = (c * LPR + lane) * 4 + j;
          nk[4 * c + j] = static_cast<float>(kp[ok + e * k_strides[3]]);
          nq[4 * c + j] = static_cast<float>(qp[oq + e * q_strides[3]]);
        }
      }
      nv = static_cast<float>(vp[(t + 1) * v_strides[1]]);
      ng = static_cast<float>(gp[(t + 1) * g_strides[1]]);
      nb = static_cast<float>(bp[(t + 1) * beta_strides[1]]);
    }
    if (GATES) {
      const float x = gt + dtb;
      const float softplus = fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)));
      gt = expf(-ea * softplus);
      bt = 1.f / (1.f + expf(-bt));
    }
    float kv = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      st[i] *= gt;
      kv += st[i] * kk[i];
    }
    kv = group_sum<LPR>(kv);
    const float delta = (vt - kv) * bt;
    float o = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      st[i] += kk[i] * delta;
      o += st[i] * qq[i];
    }
    o = group_sum<LPR>(o);
    if (lane == 0) yp[size_t(t) * Hv * Dv] = static_cast<OutT>(o);
#pragma unroll
    for (int i = 0; i < E; ++i) { kk[i] = nk[i]; qq[i] = nq[i]; }
    vt = nv; gt = ng; bt = nb;
  }
  if (lane == 0) {
    for (int t = len; t < T; ++t) yp[size_t(t) * Hv * Dv] = static_cast<OutT>(0.f);
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int e0 = (c * LPR + lane) * 4;
    *reinterpret_cast<float4*>(s_io + e0) =
        make_float4(st[4 * c], st[4 * c + 1], st[4 * c + 2], st[4 * c + 3]);
  }
"""

# Same contract for Metal (no prefetch); guarded by the self-test.
_METAL_SOURCE = """
  constexpr int E = Dk / LPR;
  const int B = q_shape[0];
  const int T = q_shape[1];
  const int tid = int(thread_position_in_grid.x);
  const int row = tid / LPR;
  const int lane = tid % LPR;
  if (row >= B * Hv * Dv) return;
  const int n = row / Dv;
  const int hv = n % Hv;
  const int b = n / Hv;
  const int hk = hv / (Hv / Hk);
  const int dv = row % Dv;
  const int len = min(int(lengths[b]), T);
  auto s_io = const_cast<device float*>(pool) + slots[b] * pool_strides[0]
              + hv * pool_strides[1] + dv * pool_strides[2];
  auto qp = q + b * q_strides[0] + hk * q_strides[2];
  auto kp = k + b * k_strides[0] + hk * k_strides[2];
  auto vp = v + b * v_strides[0] + hv * v_strides[2] + dv * v_strides[3];
  auto gp = g + b * g_strides[0] + hv * g_strides[2];
  auto bp = beta + b * beta_strides[0] + hv * beta_strides[2];
  auto yp = y + (size_t(b) * T * Hv + hv) * Dv + dv;
  const float ea = GATES ? metal::exp(static_cast<float>(a_log[hv])) : 0.0f;
  const float dtb = GATES ? static_cast<float>(dt_bias[hv]) : 0.0f;
  const bool zero = fresh[b] != 0;

  float st[E];
  for (int i = 0; i < E; ++i) {
    const int e = ((i / 4) * LPR + lane) * 4 + (i % 4);
    st[i] = zero ? 0.0f : s_io[e];
  }
  for (int t = 0; t < len; ++t) {
    const int64_t ok = t * k_strides[1], oq = t * q_strides[1];
    float gt = static_cast<float>(gp[t * g_strides[1]]);
    float bt = static_cast<float>(bp[t * beta_strides[1]]);
    if (GATES) {
      const float x = gt + dtb;
      const float softplus = metal::max(x, 0.0f) + metal::log(1.0f + metal::exp(-metal::abs(x)));
      gt = metal::exp(-ea * softplus);
      bt = 1.0f / (1.0f + metal::exp(-bt));
    }
    float kk[E];
    float kv = 0.0f;
    for (int i = 0; i < E; ++i) {
      const int e = ((i / 4) * LPR + lane) * 4 + (i % 4);
      kk[i] = static_cast<float>(kp[ok + e * k_strides[3]]);
      st[i] *= gt;
      kv += st[i] * kk[i];
    }
    for (ushort off = LPR / 2; off > 0; off >>= 1) kv += simd_shuffle_xor(kv, off);
    const float delta = (static_cast<float>(vp[t * v_strides[1]]) - kv) * bt;
    float o = 0.0f;
    for (int i = 0; i < E; ++i) {
      const int e = ((i / 4) * LPR + lane) * 4 + (i % 4);
      st[i] += kk[i] * delta;
      o += st[i] * static_cast<float>(qp[oq + e * q_strides[3]]);
    }
    for (ushort off = LPR / 2; off > 0; off >>= 1) o += simd_shuffle_xor(o, off);
    if (lane == 0) yp[size_t(t) * Hv * Dv] = static_cast<OutT>(o);
  }
  if (lane == 0) {
    for (int t = len; t < T; ++t) yp[size_t(t) * Hv * Dv] = static_cast<OutT>(0.0f);
  }
  for (int i = 0; i < E; ++i) {
    const int e = ((i / 4) * LPR + lane) * 4 + (i % 4);
    s_io[e] = st[i];
  }
"""

_INPUTS = ["q", "k", "v", "g", "beta", "pool", "slots", "fresh", "lengths", "a_log",
           "dt_bias"]
_OUTPUTS = ["y"]
_KERNEL = KernelBuild(NAME, "tandem_gated_delta_chunk", _INPUTS, _OUTPUTS, _CUDA_SOURCE,
                      _METAL_SOURCE, cuda_header=CUDA_HEADER, row_contiguous=False)


def _get(backend: str):
    return _KERNEL.get(backend)


_full_lengths: dict[tuple[int, int], mx.array] = {}


def _lengths(lengths, B: int, T: int) -> mx.array:
    """[B] int32 tokens per row; without lengths every row has T: a constant per (B, T),
    made once, not a fill launch per layer and chunk."""
    if lengths is not None:
        return lengths.astype(mx.int32)
    if (B, T) not in _full_lengths:
        _full_lengths[B, T] = mx.full((B,), T, dtype=mx.int32)
        mx.eval(_full_lengths[B, T])
    return _full_lengths[B, T]


def reference(q, k, v, g, beta, pool, slots, lengths=None, fresh=None, decay=None):
    """Plain-mx float32 token loop. Returns (y [B, T, Hv, Dv] in q.dtype, rows [B, Hv, Dv, Dk]).
    decay = (A_log, dt_bias): g and beta are the raw projections a and b (raw_gates)."""
    if decay is not None:
        g, beta = raw_gates(g, beta, decay)
    B, T = q.shape[:2]
    lens = _lengths(lengths, B, T)
    st = gather_states(pool, slots, fresh)                               # [B, Hv, Dv, Dk]
    ys = []
    for t in range(T):
        y_t, new = step_math(st, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
        live = (lens > t)[:, None, None]                                 # [B, 1, 1]
        st = mx.where(live[..., None], new, st)
        ys.append(mx.where(live, y_t, 0.0))
    return mx.stack(ys, axis=1).astype(q.dtype), st


def applies(q, k, v, pool, lanes: int | None) -> bool:
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    return (lanes is not None and pool.dtype == mx.float32 and Hv % Hk == 0
            and k.shape == q.shape and 32 % lanes == 0 and Dk % (4 * lanes) == 0 and (Dv * lanes) % 32 == 0
            and pool.shape[1:] == (Hv, Dv, Dk))


def default_lanes(B: int, Hv: int, Dk: int, Dv: int) -> int | None:
    """Few rows want many lanes (more warps in flight), many rows want few (more state
    per lane). H200, real heads: B=1 T=4096 is 1.3x faster at 32 lanes than at 8,
    B=4 T=512 1.4x faster at 8 than at 32. Always a layout that fits the shape."""
    prefer = (32, 16, 8) if B * Hv * Dv < 8192 else (8, 16, 32)
    return pick_lanes(Dk, Dv, prefer)


def kernel(q, k, v, g, beta, pool, slots, lengths=None, fresh=None, *, backend: str,
           lanes: int | None = None, decay=None):
    """Launch on `backend` ('cuda' | 'metal'): returns y [B, T, Hv, Dv] in q.dtype and
    rewrites pool[slots] in place when evaluated. decay = (A_log, dt_bias) [Hv]: g and
    beta are the raw a, b [B, T, Hv], turned into the decay and beta in registers (no
    launch of their own). q, k, v, g and beta are read through their strides (views of
    the conv's output and the projection: no copies)."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    lanes = lanes or default_lanes(B, Hv, Dk, Dv)
    fr = _fresh_flags(fresh, B)
    a_log, dt_bias = _no_decay() if decay is None else decay
    # slots, fresh and lengths are [B] arrays the runner builds (row contiguous), taken as
    # they are, as gated_delta_step takes its slots and flags: a Contiguous node each,
    # per layer, was 90 graph nodes in every chunk forward that copied nothing.
    rest = [slots.astype(mx.int32), fr, _lengths(lengths, B, T), a_log, dt_bias]
    (y,) = _get(backend)(
        inputs=[q, k, v, g, beta, pool] + rest,
        template=[("OutT", q.dtype), ("Hk", Hk), ("Hv", Hv), ("Dk", Dk), ("Dv", Dv),
                  ("LPR", lanes), ("GATES", int(decay is not None))],
        grid=(B * Hv * Dv * lanes, 1, 1), threadgroup=(128, 1, 1),
        output_shapes=[(B, T, Hv, Dv)], output_dtypes=[q.dtype])
    return y
