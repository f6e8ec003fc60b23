"""Gated DeltaNet's decode step with its output norm in the epilogue: one launch, not two.

Per row b, value head h: the step of kernels/gated_delta_step.py (the state read from and
written back to pool[slots[b], h] in place: that module's contract), then the gated norm
of kernels/gated_rms_norm.py on the head's y [Dv] before it leaves the kernel:

    out = y * rsqrt(mean(y^2) + eps) * w * z * sigmoid(z)     # float32, cast to q's dtype

y stays float32 between the two (the two-launch path rounds it to q's dtype first: in
bf16 the paths differ by that rounding, in float32 by summation order only). z is a view
of the joined input projection, read through its strides like every input: [B, Hv*Dv]
(Z3=0: the heads joined, as Qwen3.5's projection gives them, so no reshape node comes
before the launch) or [B, Hv, Dv] (Z3=1: Qwen3-Next's grouped layout, whose heads are
not evenly strided). `columns` (ZC, BC, GC): z, beta and g are the whole joined input
projection [B, *], read from those columns (no Split node before the launch).

Layout. The norm needs a head's whole y, and the step kernel spreads a head's Dv rows
over Dv*32/128 blocks; here a block owns one head (b, hv). Its threads run the step
kernel's own row update (LPR lanes a state row), ROWS rows each in turn, so that the
block is Dv*LPR/ROWS <= 1024 threads. The block keeps y in shared memory; warp 0 sums
the squares in gated_rms_norm's order (lane i: rows i, i+32, ...; then the butterfly);
thread i writes out[i]. At the real head (Dk = Dv = 128): 16 lanes, 2 rows, 1024
threads, 40 registers (nvcc sm_90a, bf16 and float32). One row a thread (8 lanes) took
56 to 66 registers as this epilogue's code changed: too near the 64 within which a block
of 1024 threads launches at all.
"""
from __future__ import annotations

import math
import os

import mlx.core as mx

import kernels.gated_delta_step as gds
import kernels.gated_rms_norm as grn
from kernels.kernel_build import KernelBuild, scalar

NAME = "gated_delta_step_norm"
MAX_THREADS = 1024      # a block's limit on CUDA and on Apple GPUs
# Floats of a state row a lane holds (and as many of k): at most 8 keeps a thread near
# 40 registers (64 is the most a block of 1024 threads can have).
MAX_PER_LANE = 8
# Lanes a row, in order of preference: the fewest rows a thread comes first (latency:
# a thread's rows run one after another), then these.
LANES = (16, 32, 8, 4)

_CUDA_SOURCE = """
  constexpr int E = Dk / LPR;
  constexpr int C = E / 4;
  constexpr int THREADS = Dv * LPR / ROWS;   // blockDim.x
  __shared__ float ys[Dv];                   // the head's y, for its norm
  __shared__ float inv_s[1];
  const int n = blockIdx.x;                  // b * Hv + hv: a block per head
  const int lane = threadIdx.x % LPR;
  const int hv = n % Hv;
  const int b = n / Hv;
  const int hk = hv / (Hv / Hk);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
  const int dv = r * (Dv / ROWS) + threadIdx.x / LPR;""" + gds.CUDA_ROW_UPDATE + """
  if (lane == 0) ys[dv] = o;
  }
  __syncthreads();
  // kernels/gated_rms_norm.py's float32 order: warp 0 sums the squares, lane i rows
  // i, i+32, ..., then the butterfly.
  if (threadIdx.x < 32) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < Dv; i += 32) {
      const float yi = ys[i];
      ss += yi * yi;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (threadIdx.x == 0) inv_s[0] = rsqrtf(ss / Dv + eps[0]);
  }
  __syncthreads();
  const int64_t z_head = Z3 ? z_strides[1] : int64_t(Dv) * z_strides[1];
  const auto* zr = z + b * z_strides[0] + ZC * z_strides[1] + hv * z_head;
  for (int i = threadIdx.x; i < Dv; i += THREADS) {
    const float zi = static_cast<float>(zr[i * z_strides[Z3 ? 2 : 1]]);
    const float nv = ys[i] * inv_s[0] * static_cast<float>(weight[i * weight_strides[0]]);
    out[size_t(n) * Dv + i] = static_cast<OutT>(nv * zi / (1.f + __expf(-zi)));
  }
"""

# Same layout for Metal (SIMD width 32; simdgroup 0 is threads 0..31, as add_rms_norm
# assumes; the sum of squares is gated_rms_norm's Metal simd_sum); it cannot run on the
# Linux machines: the self-test guards it at engine start.
_METAL_SOURCE = """
  constexpr int E = Dk / LPR;
  constexpr int C = E / 4;
  constexpr int THREADS = Dv * LPR / ROWS;
  threadgroup float ys[Dv];
  threadgroup float inv_s[1];
  const int n = int(threadgroup_position_in_grid.x);
  const int t = int(thread_position_in_threadgroup.x);
  const int lane = t % LPR;
  const int hv = n % Hv;
  const int b = n / Hv;
  const int hk = hv / (Hv / Hk);
  for (int r = 0; r < ROWS; ++r) {
  const int dv = r * (Dv / ROWS) + t / LPR;""" + gds.METAL_ROW_UPDATE + """
  if (lane == 0) ys[dv] = o;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t < 32) {
    float ss = 0.0f;
    for (int i = t; i < Dv; i += 32) {
      const float yi = ys[i];
      ss += yi * yi;
    }
    ss = simd_sum(ss);
    if (t == 0) inv_s[0] = metal::rsqrt(ss / Dv + eps[0]);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int64_t z_head = Z3 ? z_strides[1] : int64_t(Dv) * z_strides[1];
  auto zr = z + b * z_strides[0] + ZC * z_strides[1] + hv * z_head;
  for (int i = t; i < Dv; i += THREADS) {
    const float zi = static_cast<float>(zr[i * z_strides[Z3 ? 2 : 1]]);
    const float nv = ys[i] * inv_s[0] * static_cast<float>(weight[i * weight_strides[0]]);
    out[size_t(n) * Dv + i] = static_cast<OutT>(nv * zi / (1.0f + metal::exp(-zi)));
  }
"""

_INPUTS = ["q", "k", "v", "g", "beta", "pool", "slots", "fresh", "a_log", "dt_bias", "z",
           "weight", "eps"]
_OUTPUTS = ["out"]
_KERNEL = KernelBuild(NAME, "tandem_gated_delta_step_norm", _INPUTS, _OUTPUTS, _CUDA_SOURCE,
                      _METAL_SOURCE, cuda_header=gds.CUDA_HEADER, row_contiguous=False)


def fits(Dk: int, Dv: int, lanes: int, rows: int) -> bool:
    """The layout (lanes a row, rows a thread) at these head sizes: the step kernel's rows
    (float4 chunks a lane, aligned lane groups inside a warp), at most MAX_PER_LANE floats
    a lane, a head's rows split evenly into one block of whole warps, <= MAX_THREADS."""
    threads = Dv * lanes // rows
    return (32 % lanes == 0 and Dk % (4 * lanes) == 0 and Dk // lanes <= MAX_PER_LANE
            and Dv % rows == 0 and threads % 32 == 0
            and threads <= MAX_THREADS)


# From this many rows (a decode batch), WIDE_LAYOUT where it fits: 512-thread blocks of 32
# lanes a row and 8 rows a thread. Timed on an H100 (session 44, `python3 -m
# kernels.bench.gated_delta_step`, medians of 5 alternating rounds, the real heads): 63.1
# against 69.3 us a layer at B=16, 90.5 against 127.2 at B=32 for (16, 2); at B=1 51.2
# against 45.8, so small batches keep the fewest rows a thread. CUDA only: on Metal not
# timed. TANDEM_GDSN_WIDE_FROM=N moves the threshold (a benchmark's before/after: 0 for
# never).
WIDE_FROM = int(os.environ.get("TANDEM_GDSN_WIDE_FROM", "16")) or math.inf
WIDE_LAYOUT = (32, 8)


def pick_layout(Dk: int, Dv: int, batch: int = 1,
                backend: str | None = None) -> tuple[int, int] | None:
    """(lanes, rows) for these head sizes and `batch` rows on `backend`: on CUDA
    WIDE_LAYOUT from WIDE_FROM rows where it fits, else the fewest rows a thread, then
    LANES' order. (Where WIDE_LAYOUT fits, so does the other: `applies` asks for that.)"""
    if backend == "cuda" and batch >= WIDE_FROM and fits(Dk, Dv, *WIDE_LAYOUT):
        return WIDE_LAYOUT
    for rows in range(1, Dv + 1):
        for lanes in LANES:
            if fits(Dk, Dv, lanes, rows):
                return lanes, rows
    return None


def applies(q, k, v, pool, z, weight, columns: tuple[int, int, int] | None = None) -> bool:
    """Shapes the kernel handles: the step kernel's (at a layout of this kernel's), z
    shaped like v or [B, Hv*Dv] (v's heads joined), or with `columns` (z's, beta's, g's)
    the joined projection [B, W] holding all three there; a weight a value channel."""
    layout = pick_layout(q.shape[-1], v.shape[-1])
    B, Hv, Dv = v.shape
    if columns is None:
        z_ok = z.shape in (v.shape, (B, Hv * Dv))
    else:
        zc, bc, gc = columns
        z_ok = (z.ndim == 2 and z.shape[0] == B and min(columns) >= 0
                and z.shape[1] >= max(zc + Hv * Dv, bc + Hv, gc + Hv))
    return (layout is not None and gds.applies(q, k, v, pool, layout[0])
            and z_ok and weight.shape == (Dv,)
            and all(mx.issubdtype(a.dtype, mx.floating) for a in (z, weight)))


def reference(q, k, v, g, beta, pool, slots, z, weight, eps: float, fresh=None, decay=None,
              columns: tuple[int, int, int] | None = None):
    """Plain-mx float32: the step's reference, then the gated norm's on the unrounded y;
    z [B, Hv, Dv] or [B, Hv*Dv], or with `columns` as `kernel`. Returns (out [B, Hv, Dv]
    in q.dtype, rows [B, Hv, Dv, Dk] f32)."""
    if columns is not None:
        (zc, bc, gc), (Hv, Dv) = columns, v.shape[1:]
        z, beta, g = z[:, zc:zc + Hv * Dv], beta[:, bc:bc + Hv], g[:, gc:gc + Hv]
    if decay is not None:
        g, beta = gds.raw_gates(g, beta, decay)
    y, st = gds.step_math(gds.gather_states(pool, slots, fresh), q, k, v, g, beta)
    z = z.reshape(y.shape)                                               # [B, Hv, Dv]
    out = grn.reference(y[:, None], z[:, None], weight, eps)[:, 0]       # float32 as y
    return out.astype(q.dtype), st


def kernel(q, k, v, g, beta, pool, slots, z, weight, eps: float, fresh=None, *, backend: str,
           decay=None, layout: tuple[int, int] | None = None, joined: bool = False,
           columns: tuple[int, int, int] | None = None):
    """Launch on `backend`: out [B, Hv, Dv] in q.dtype as `reference`; pool[slots] rewritten
    in place when evaluated (kernels/gated_delta_step.py's contract). decay = (A_log,
    dt_bias): g and beta are the raw a, b. layout: (lanes, rows), else pick_layout's.
    joined: out declared [B, Hv*Dv], the heads joined as the out projection reads them
    (the same buffer: the kernel writes it flat; no Reshape node after the launch).
    columns (z's, beta's, g's): z, beta and g are one joined projection, read there."""
    zc, bc, gc = columns or (0, 0, 0)
    B, Hk, Dk = q.shape
    Hv, Dv = v.shape[1], v.shape[2]
    lanes, rows = layout or pick_layout(Dk, Dv, B, backend)
    if not fits(Dk, Dv, lanes, rows):
        raise ValueError(f"layout {(lanes, rows)} does not fit heads Dk={Dk}, Dv={Dv}")
    a_log, dt_bias = gds._no_decay() if decay is None else decay
    (out,) = _KERNEL.get(backend)(
        inputs=[q, k, v, g, beta, pool, slots.astype(mx.int32), gds._fresh_flags(fresh, B),
                a_log, dt_bias, z, weight, scalar(float(eps))],
        template=[("OutT", q.dtype), ("Hk", Hk), ("Hv", Hv), ("Dk", Dk), ("Dv", Dv),
                  ("LPR", lanes), ("ROWS", rows), ("GATES", int(decay is not None)),
                  ("Z3", int(z.ndim == 3)), ("ZC", zc), ("BC", bc), ("GC", gc)],
        grid=(B * Hv * Dv * lanes // rows, 1, 1), threadgroup=(Dv * lanes // rows, 1, 1),
        output_shapes=[(B, Hv * Dv) if joined else (B, Hv, Dv)], output_dtypes=[q.dtype])
    return out
