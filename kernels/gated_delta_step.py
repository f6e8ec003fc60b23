"""Gated DeltaNet decode step for a batch of state slots, fused.

Per row b, value head h (key head hk = h // (Hv // Hk)), with S the [Dv, Dk]
state read from pool[slots[b], h] (zero when fresh[b]):

    S     = g * S                      # g is the decay already exponentiated:
                                       #   g = exp(-exp(A_log) * softplus(a + dt_bias)) in (0, 1]
    kv    = S @ k                      # [Dv]
    delta = (v - kv) * beta            # [Dv]
    S     = S + outer(delta, k)        # [Dv, Dk]
    y     = S @ q                      # [Dv]

The kernel reads each row's state straight out of the pool by slot index and
writes the new state back into the same place: no gathered copy, no scatter.
MLX custom kernels cannot alias an output onto an input, so it writes through
the pool input's pointer. The alternative, compact rows plus `pool[slots] =
rows`, is far worse than it looks: the kernel that read the pool still holds
its buffer when the scatter runs, so MLX cannot donate it and copies the
whole pool (every slot, every step; measured ~5x the kernel at B=32).

In-place contract (see also `gated_delta_chunk`):
- the pool is a materialised array whose last axis has unit stride (any pool
  made by mx.zeros / concatenate / slicing along the slot axis); other axes
  may be strided (the kernel reads pool_strides);
- use the returned pool: it depends on y, so MLX schedules whatever is built on
  it after the kernel; but on the GPU only a reader that consumes y (or a later
  output) is ordered after the write (MLX tracks GPU-side ordering by declared
  outputs only: kernels/README.md, "Ordering on a GPU"), so nothing else may read
  the pool in the same evaluation; evaluate the step before reading pool rows
  (snapshots, tests);
- slots are unique within a batch.
"""
from __future__ import annotations

from functools import cache

import mlx.core as mx

from kernels.kernel_build import cuda_kernel
from kernels.stand_in import COUNT, StandInKernel

NAME = "gated_delta_step"
# Lanes per state row, first valid one wins. H200, B=1..32 at the real shapes: 32 lanes
# is 4-7% faster than 8 and 15% faster than 4 (kernels/bench/gated_delta_step.py).
LANE_PREFERENCE = (32, 8, 4)

CUDA_HEADER = """
template <int LPR>
__device__ __forceinline__ float group_sum(float x) {
  // Butterfly inside aligned groups of LPR lanes: offsets < LPR never cross a group.
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, off);
  }
  return x;
}
"""

# The update of one state row (b, hv, dv) by its LPR lanes, given b, hv, hk, dv and lane:
# the part kernels/gated_delta_step_norm.py shares (its rows are laid out per head). Each
# lane keeps E = Dk/LPR floats of the row in registers as float4 chunks interleaved
# across the group, so every float4 load of the group reads LPR*16 contiguous bytes.
# Leaves the row's y (summed over the group: every lane holds it) in `o`.
CUDA_ROW_UPDATE = """
  // In place: the pool is declared an input but this row is written back below.
  float* s_io = const_cast<float*>(pool) + slots[b * slots_strides[0]] * pool_strides[0]
                + hv * pool_strides[1] + dv * pool_strides[2];
  // q, k, v, g, beta are read through their strides (views of the projections); g and
  // beta from columns GC.., BC.. (0, or where they sit in the joined input projection)
  const auto* qp = q + b * q_strides[0] + hk * q_strides[1];
  const auto* kp = k + b * k_strides[0] + hk * k_strides[1];
  float gt = static_cast<float>(g[b * g_strides[0] + (GC + hv) * g_strides[1]]);
  float bt = static_cast<float>(beta[b * beta_strides[0] + (BC + hv) * beta_strides[1]]);
  if (GATES) {   // g holds a, beta holds b: the decay and the write strength from them
    const float x = gt + static_cast<float>(dt_bias[hv]);
    const float softplus = fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)));
    gt = expf(-expf(static_cast<float>(a_log[hv])) * softplus);
    bt = 1.f / (1.f + expf(-bt));
  }
  const float vt = static_cast<float>(v[b * v_strides[0] + hv * v_strides[1] + dv * v_strides[2]]);
  const bool zero = fresh[b * fresh_strides[0]] != 0;

  float st[E];
  float kk[E];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int e0 = (c * LPR + lane) * 4;
    float4 s4 = zero ? make_float4(0.f, 0.f, 0.f, 0.f)
                     : *reinterpret_cast<const float4*>(s_io + e0);
    st[4 * c + 0] = s4.x; st[4 * c + 1] = s4.y; st[4 * c + 2] = s4.z; st[4 * c + 3] = s4.w;
#pragma unroll
    for (int j = 0; j < 4; ++j) kk[4 * c + j] = static_cast<float>(kp[(e0 + j) * k_strides[2]]);
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
  for (int c = 0; c < C; ++c) {
    const int e0 = (c * LPR + lane) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = 4 * c + j;
      st[i] += kk[i] * delta;
      o += st[i] * static_cast<float>(qp[(e0 + j) * q_strides[2]]);
    }
    *reinterpret_cast<float4*>(s_io + e0) =
        make_float4(st[4 * c], st[4 * c + 1], st[4 * c + 2], st[4 * c + 3]);
  }
  o = group_sum<LPR>(o);
"""

# One state row (b, hv, dv) per LPR lanes, rows in order over the whole grid.
_CUDA_SOURCE = """
  constexpr int E = Dk / LPR;
  constexpr int C = E / 4;
  const int B = q_shape[0];
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = tid / LPR;                 // (b * Hv + hv) * Dv + dv
  const int lane = tid % LPR;
  if (row >= B * Hv * Dv) return;            // whole warps only: Dv*LPR % 32 == 0
  const int n = row / Dv;                    // b * Hv + hv
  const int hv = n % Hv;
  const int b = n / Hv;
  const int hk = hv / (Hv / Hk);
  const int dv = row % Dv;""" + CUDA_ROW_UPDATE + """  if (lane == 0) y[row] = static_cast<OutT>(o);
"""

# Same row update for Metal (SIMD width 32); it cannot run on the Linux machines, so the
# self-test guards it at engine start.
METAL_ROW_UPDATE = """
  auto s_io = const_cast<device float*>(pool) + slots[b * slots_strides[0]] * pool_strides[0]
              + hv * pool_strides[1] + dv * pool_strides[2];
  auto qp = q + b * q_strides[0] + hk * q_strides[1];
  auto kp = k + b * k_strides[0] + hk * k_strides[1];
  float gt = static_cast<float>(g[b * g_strides[0] + (GC + hv) * g_strides[1]]);
  float bt = static_cast<float>(beta[b * beta_strides[0] + (BC + hv) * beta_strides[1]]);
  if (GATES) {
    const float x = gt + static_cast<float>(dt_bias[hv]);
    const float softplus = metal::max(x, 0.0f) + metal::log(1.0f + metal::exp(-metal::abs(x)));
    gt = metal::exp(-metal::exp(static_cast<float>(a_log[hv])) * softplus);
    bt = 1.0f / (1.0f + metal::exp(-bt));
  }
  const float vt = static_cast<float>(v[b * v_strides[0] + hv * v_strides[1] + dv * v_strides[2]]);
  const bool zero = fresh[b * fresh_strides[0]] != 0;

  float st[E];
  float kk[E];
  for (int c = 0; c < C; ++c) {
    const int e0 = (c * LPR + lane) * 4;
    for (int j = 0; j < 4; ++j) {
      st[4 * c + j] = zero ? 0.0f : s_io[e0 + j];
      kk[4 * c + j] = static_cast<float>(kp[(e0 + j) * k_strides[2]]);
    }
  }
  float kv = 0.0f;
  for (int i = 0; i < E; ++i) {
    st[i] *= gt;
    kv += st[i] * kk[i];
  }
  for (ushort off = LPR / 2; off > 0; off >>= 1) kv += simd_shuffle_xor(kv, off);
  const float delta = (vt - kv) * bt;
  float o = 0.0f;
  for (int c = 0; c < C; ++c) {
    const int e0 = (c * LPR + lane) * 4;
    for (int j = 0; j < 4; ++j) {
      const int i = 4 * c + j;
      st[i] += kk[i] * delta;
      o += st[i] * static_cast<float>(qp[(e0 + j) * q_strides[2]]);
      s_io[e0 + j] = st[i];
    }
  }
  for (ushort off = LPR / 2; off > 0; off >>= 1) o += simd_shuffle_xor(o, off);
"""

_METAL_SOURCE = """
  constexpr int E = Dk / LPR;
  constexpr int C = E / 4;
  const int B = q_shape[0];
  const int tid = int(thread_position_in_grid.x);
  const int row = tid / LPR;
  const int lane = tid % LPR;
  if (row >= B * Hv * Dv) return;
  const int n = row / Dv;
  const int hv = n % Hv;
  const int b = n / Hv;
  const int hk = hv / (Hv / Hk);
  const int dv = row % Dv;""" + METAL_ROW_UPDATE + """  if (lane == 0) y[row] = static_cast<OutT>(o);
"""

_INPUTS = ["q", "k", "v", "g", "beta", "pool", "slots", "fresh", "a_log", "dt_bias"]
_OUTPUTS = ["y"]
_built: dict[str, object] = {}


def _get(backend: str):
    if backend == COUNT:
        return StandInKernel(NAME)
    if backend not in _built:
        if backend == "cuda":
            _built[backend] = cuda_kernel(
                name="tandem_gated_delta_step", input_names=_INPUTS, output_names=_OUTPUTS,
                source=_CUDA_SOURCE, header=CUDA_HEADER, ensure_row_contiguous=False)
        else:
            _built[backend] = mx.fast.metal_kernel(
                name="tandem_gated_delta_step", input_names=_INPUTS, output_names=_OUTPUTS,
                source=_METAL_SOURCE, ensure_row_contiguous=False)
    return _built[backend]


_no_fresh: dict[int, mx.array] = {}


def _fresh_flags(fresh: mx.array | None, batch: int) -> mx.array:
    if fresh is None:       # decode: a constant per batch size, not a zeros op per step
        if batch not in _no_fresh:
            _no_fresh[batch] = mx.zeros((batch,), dtype=mx.int32)
            mx.eval(_no_fresh[batch])
        return _no_fresh[batch]
    return fresh.astype(mx.int32)


def raw_gates(a, b, decay):
    """float32 (g, beta) [B, Hv] from the raw projections a, b [B, Hv] and decay =
    (A_log, dt_bias) [Hv]: g = exp(-exp(A_log) * softplus(a + dt_bias)), beta = sigmoid(b)
    (engine/models/elementwise.decay_and_beta)."""
    a_log, dt_bias = decay
    x = a.astype(mx.float32) + dt_bias.astype(mx.float32)
    g = mx.exp(-mx.exp(a_log.astype(mx.float32)) * mx.logaddexp(x, 0.0))
    return g, mx.sigmoid(b.astype(mx.float32))


def step_math(st, q, k, v, g, beta):
    """One recurrence update in float32 on gathered states.

    st [B, Hv, Dv, Dk]; q, k [B, Hk, Dk]; v [B, Hv, Dv]; g, beta [B, Hv].
    Returns (y [B, Hv, Dv] f32, st [B, Hv, Dv, Dk] f32).
    """
    rep = v.shape[1] // q.shape[1]
    qf = mx.repeat(q.astype(mx.float32), rep, axis=1)[:, :, None, :]     # [B, Hv, 1, Dk]
    kf = mx.repeat(k.astype(mx.float32), rep, axis=1)[:, :, None, :]     # [B, Hv, 1, Dk]
    st = st * g.astype(mx.float32)[:, :, None, None]
    kv = (st * kf).sum(-1)                                               # [B, Hv, Dv]
    delta = (v.astype(mx.float32) - kv) * beta.astype(mx.float32)[:, :, None]
    st = st + delta[..., None] * kf
    return (st * qf).sum(-1), st


def gather_states(pool, slots, fresh=None):
    """[B, Hv, Dv, Dk] float32 copies of the slots' states, zero where fresh."""
    st = pool[slots].astype(mx.float32)
    if fresh is not None:
        st = mx.where(fresh.astype(mx.bool_)[:, None, None, None], 0.0, st)
    return st


def reference(q, k, v, g, beta, pool, slots, fresh=None, decay=None):
    """Plain-mx float32 step. Returns (y [B, Hv, Dv] in q.dtype, rows [B, Hv, Dv, Dk] f32).
    decay = (A_log, dt_bias): g and beta are the raw projections a and b (raw_gates)."""
    if decay is not None:
        g, beta = raw_gates(g, beta, decay)
    y, st = step_math(gather_states(pool, slots, fresh), q, k, v, g, beta)
    return y.astype(q.dtype), st


def pick_lanes(Dk: int, Dv: int, prefer=LANE_PREFERENCE) -> int | None:
    """First lane count whose layout fits: float4 chunks per lane, whole warps."""
    for lanes in prefer:
        if Dk % (4 * lanes) == 0 and (Dv * lanes) % 32 == 0:
            return lanes
    return None


def applies(q, k, v, pool, lanes: int | None) -> bool:
    """Shapes the kernel handles; anything else takes the reference."""
    B, Hk, Dk = q.shape
    Hv, Dv = v.shape[1], v.shape[2]
    return (lanes is not None and pool.dtype == mx.float32 and Hv % Hk == 0
            and k.shape == q.shape and 32 % lanes == 0 and Dk % (4 * lanes) == 0 and (Dv * lanes) % 32 == 0
            and pool.shape[1:] == (Hv, Dv, Dk))


@cache
def _no_decay() -> tuple[mx.array, mx.array]:
    """Placeholders for the decay inputs when g and beta come ready (GATES=0: unread)."""
    a = (mx.zeros((1,), mx.float32), mx.zeros((1,), mx.float32))
    mx.eval(*a)
    return a


def kernel(q, k, v, g, beta, pool, slots, fresh=None, *, backend: str, lanes: int | None = None,
           decay=None):
    """Launch on `backend` ('cuda' | 'metal'): returns y [B, Hv, Dv] in q.dtype and
    rewrites pool[slots] in place when evaluated (see the module's contract).
    decay = (A_log, dt_bias) [Hv]: g and beta are the raw a, b [B, Hv] (reference says how
    they become the decay and beta; the kernel does it in registers, no launch of its own).
    Every input but the pool is read through its strides (views, no copies)."""
    B, Hk, Dk = q.shape
    Hv, Dv = v.shape[1], v.shape[2]
    lanes = lanes or pick_lanes(Dk, Dv)
    a_log, dt_bias = _no_decay() if decay is None else decay
    (y,) = _get(backend)(
        inputs=[q, k, v, g, beta, pool, slots.astype(mx.int32), _fresh_flags(fresh, B),
                a_log, dt_bias],
        template=[("OutT", q.dtype), ("Hk", Hk), ("Hv", Hv), ("Dk", Dk), ("Dv", Dv),
                  ("LPR", lanes), ("GATES", int(decay is not None)), ("GC", 0), ("BC", 0)],
        grid=(B * Hv * Dv * lanes, 1, 1), threadgroup=(128, 1, 1),
        output_shapes=[(B, Hv, Dv)], output_dtypes=[q.dtype])
    return y
