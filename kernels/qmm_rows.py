"""A 4- or 8-bit quantized matmul for a few rows (decode batches), on tensor cores.

    y[m, n] = sum_k x[m, k] * (scale[n, g(k)] * q[n, k] + bias[n, g(k)])     x [M, K], y [M, N]

MLX's affine quantization (``mx.quantize``, 4 or 8 bits): w uint32 [N, K * bits / 32]
(weight t of a word in its bits t * bits and up), scales and biases [N, K / group]. This
is ``mx.quantized_matmul(x, w, scales, biases, transpose=True)`` for 2 <= M <=
``MAX_ROWS``.

Why: on the H200, MLX 0.32's CUDA backend runs a decode batch of 16 rows through its
tiled `qmm_sm80` kernel at 46 us a 4-bit projection (81 a step of the Qwen3.5-35B-A3B
model: 3.7 ms of B=16's 13.6 ms of GPU time, ~11 % of the bandwidth its ~1.3 GB of
weights need) and 23 us an 8-bit router (40 a step: 0.9 ms more; kernel_time, session
20). Here each warp streams 16 weight rows once with 16-byte loads, turns each weight
into bf16 once (scale * q + bias, rounded: as a bf16 weight read by a tiled kernel),
and multiplies all M rows at once with the tensor cores' m16n8k16 bf16 product (float32
sums). K is split over the warps of a block, whose partial sums are added in a fixed
order.

CUDA only. On Metal, MLX's own quantized matmul has its small-batch kernels, and no
Mac has measured this against them: the self-test leaves it off there
(kernels/backend.py, `CUDA_ONLY`), so the model keeps ``mx.quantized_matmul``.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild
from kernels.qmm_rows_src import CUDA_HEADER, CUDA_SOURCE

NAME = "qmm_rows"
# Rows the kernel takes: two 16-row tiles (B=32 decode). Past that MLX's tiled kernel
# has enough rows to fill its tiles (prompt chunks). One row stays MLX's `qmv`.
MIN_ROWS = 2
MAX_ROWS = 32
GROUP_SIZES = (32, 64, 128)       # a lane's 32 weights lie in one group
BITS = (4, 8)                     # the 35B-A3B's projections (4) and its router gates (8)
K_BLOCK = 128                     # K is read in blocks of 128 weights (4 lanes x 32)
MAX_SPLIT = 8                     # warps a block splitting K
NT = 2                            # 8-column output tiles a warp (16 weight rows)
# Which layout a launch takes: "shape" (`layout`'s rules, from session 47's sweep) or
# "uniform" (NT tiles a warp, `split` warps a block everywhere, as before session 47): a
# bench's --qmm-layout, so one lease can time both.
# (Session 46: 8 tiles a warp from N=8192, the old WIDE_NT, was slower: 24.3 vs ~18.3 us.)
LAYOUT = "shape"
SMEM_MAX = 48 * 1024              # a block's static shared memory (the partial sums)

_KERNEL = KernelBuild(NAME, "tandem_qmm_rows", ["x", "w", "scales", "biases"], ["y"],
                      CUDA_SOURCE, "", cuda_header=CUDA_HEADER)


def applies(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array | None,
            group_size: int, bits: int) -> bool:
    """x [M, K] bf16 with MIN_ROWS <= M <= MAX_ROWS, a 4- or 8-bit affine weight with
    N % 16 == 0 and K % 128 == 0 (every real projection of the target models)."""
    if x.ndim != 2 or w.ndim != 2 or biases is None or bits not in BITS:
        return False
    M, K = x.shape
    N = w.shape[0]
    return (MIN_ROWS <= M <= MAX_ROWS and x.dtype == mx.bfloat16 and w.dtype == mx.uint32
            and group_size in GROUP_SIZES and K % K_BLOCK == 0 and N % (8 * NT) == 0
            and w.shape[1] * 32 == K * bits and scales.shape == (N, K // group_size)
            and biases.shape == scales.shape)


def split(K: int) -> int:
    """Warps a block: K's 128-weight blocks shared out, at most MAX_SPLIT."""
    return min(MAX_SPLIT, K // K_BLOCK)


def reduce_bytes(M: int, K: int, nt: int, ksplit: int | None = None) -> int:
    """The block's shared memory: each warp's partial sums (MT x nt tiles of 4 a lane)."""
    return (split(K) if ksplit is None else ksplit) * -(-M // 16) * nt * 4 * 32 * 4


def layout_fits(M: int, N: int, K: int, nt: int, ksplit: int) -> bool:
    """Whether nt tiles a warp and ksplit warps a block cover [M, K] x N exactly: whole
    blocks of 8 nt columns, at least one 128-weight block of K a warp, at most 32 warps,
    the partial sums within SMEM_MAX."""
    return (nt >= 1 and N % (8 * nt) == 0 and 1 <= ksplit <= min(32, K // K_BLOCK)
            and reduce_bytes(M, K, nt, ksplit) <= SMEM_MAX)


# The rules' thresholds, from `python3 -m kernels.bench.qmm_rows_sweep --rows 16,32` (H100,
# session 47, CUPTI time a call on cold weights; docs/bench/h100-session47-2026-12-07.txt).
NARROW_N = 1024       # below: at NT 2 its N / 16 blocks are under half the H100's 132 SMs
SHORT_N = 4096        # up to, with K from LONG_K: 16 warps a block, each with 2 or more
LONG_K = 4096         # of K's 128-weight blocks, put more loads in flight a column
WIDE_N = 8192         # from, at two row tiles (x twice as large): 4 tiles, 4 warps
HEAD_N = 65536        # from, at any rows (the vocabulary head): 4 tiles, 4 warps


def layout(M: int, N: int, K: int) -> tuple[int, int]:
    """(nt, ksplit) for [M, K] x N output columns: by LAYOUT, the sweep's rules or NT and
    `split` everywhere; a rule's layout that does not fit falls back to the latter."""
    default = (NT, split(K))
    if LAYOUT == "uniform":
        return default
    if N >= HEAD_N or (M > 16 and N >= WIDE_N):
        # 4 tiles, 4 warps: the head 184.3 against 224.2 us at M=16, 315.0 against 394.5
        # at M=32; at M=32 the GDN in_proj (12416) 19.2 against 23.8, the attention's qkv
        # (9216) 18.6 against 20.1. One row tile keeps the default there (14.1 against
        # 14.5; 12.0 against 13.9).
        want = (4, 4)
    else:
        # one tile a warp where N is narrow: the 8-bit router+gate (384) 3.4 against 5.6
        # us at M=16, 4.7 against 6.6 at M=32 (at N=2048, 1x16 8.3 against 2x16's 7.2)
        nt = 1 if N < NARROW_N else NT
        # 16 warps: the output projections (2048 x 4096) 7.2 against 8.3 us at M=16, 9.6
        # against 10.3 at M=32 (at N >= 9216, K=2048, 2x16 took 17-21 us, 2x8 12-14)
        ks = 16 if N <= SHORT_N and K >= LONG_K else split(K)
        want = (nt, ks)
    return want if layout_fits(M, N, K, *want) else default


def kernel(x, w, scales, biases, group_size: int, bits: int = 4, *, backend: str,
           nt: int | None = None, ksplit: int | None = None) -> mx.array:
    """Launch on `backend` ('cuda', or the counting stand-in): y [M, N] in x's dtype.
    nt, ksplit: a layout other than `layout`'s, for the layout sweep
    (kernels/bench/qmm_rows_sweep.py); it must fit (`layout_fits`)."""
    M, K = x.shape
    N = w.shape[0]
    chosen = nt is not None or ksplit is not None     # `layout`'s always fit
    default_nt, default_ks = layout(M, N, K)
    nt = default_nt if nt is None else nt
    ks = default_ks if ksplit is None else ksplit
    if chosen and not layout_fits(M, N, K, nt, ks):
        raise ValueError(f"qmm_rows: {nt} tiles a warp, {ks} warps a block do not fit "
                         f"M={M} N={N} K={K}")
    return _KERNEL.get(backend)(
        inputs=[x, w, scales, biases],
        template=[("MT", -(-M // 16)), ("NT", nt), ("BITS", bits), ("GS", group_size),
                  ("KSPLIT", ks), ("OT", x.dtype)],
        grid=(N // (8 * nt) * 32 * ks, 1, 1), threadgroup=(32 * ks, 1, 1),
        output_shapes=[(M, N)], output_dtypes=[x.dtype])[0]


def reference(x, w, scales, biases, group_size: int, bits: int = 4) -> mx.array:
    """Plain-mx float32: x times the dequantized weight, unrounded (the tests' and the
    self-test's yardstick; the kernel rounds each weight and y to bf16)."""
    wf = mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32),
                       group_size=group_size, bits=bits)
    return x.astype(mx.float32) @ wf.T
