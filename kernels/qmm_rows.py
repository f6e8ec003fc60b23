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
# A block reads all of x over its K split (64 KB at M=16, K=2048) for 8 NT weight rows
# (16 KB of 4-bit weights at NT=2): at B=16 its L2 reads of x are ~4x its DRAM reads of
# weights (kernel_time, session 38: 13.6 us a projection, ~0.6 TB/s of weights). WIDE_NT
# tiles a warp take twice the rows a block, halving x's reads, where N >= WIDE_FROM (a
# narrow projection keeps NT: its blocks would not fill the GPU). None: never. Off: at 8192
# session 39's engine runs (`bench --qmm-wide-from 8192`, a host-bound H100 host) showed no
# gain above the spread; `kernel_time` with it on would show its own time. WIDE_NT 8 cuts
# x's reads to one a weight read, where the block's partial sums fit SMEM_MAX (one row
# tile: B <= 16); with more row tiles the warp takes the most tiles that fit
# (`bench --qmm-wide-nt 8`, `kernel_time --qmm-wide-nt 8`).
WIDE_NT = 4
WIDE_FROM: int | None = None
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


def tiles(N: int, M: int = 16, K: int = MAX_SPLIT * K_BLOCK) -> int:
    """8-column output tiles a warp for an [M, K] x times N output columns: NT, or from
    WIDE_FROM the most of WIDE_NT, WIDE_NT / 2, ... above NT whose partial sums fit
    SMEM_MAX (N a whole number of such blocks)."""
    if WIDE_FROM is None or N < WIDE_FROM:
        return NT
    nt = WIDE_NT
    while nt > NT and not layout_fits(M, N, K, nt, split(K)):
        nt //= 2
    return max(nt, NT)


def layout_fits(M: int, N: int, K: int, nt: int, ksplit: int) -> bool:
    """Whether nt tiles a warp and ksplit warps a block cover [M, K] x N exactly: whole
    blocks of 8 nt columns, at least one 128-weight block of K a warp, at most 32 warps,
    the partial sums within SMEM_MAX."""
    return (nt >= 1 and N % (8 * nt) == 0 and 1 <= ksplit <= min(32, K // K_BLOCK)
            and reduce_bytes(M, K, nt, ksplit) <= SMEM_MAX)


def kernel(x, w, scales, biases, group_size: int, bits: int = 4, *, backend: str,
           nt: int | None = None, ksplit: int | None = None) -> mx.array:
    """Launch on `backend` ('cuda', or the counting stand-in): y [M, N] in x's dtype.
    nt, ksplit: a layout other than the default's (`tiles`, `split`), for the layout sweep
    (kernels/bench/qmm_rows_sweep.py); it must fit (`layout_fits`)."""
    M, K = x.shape
    N = w.shape[0]
    chosen = nt is not None or ksplit is not None     # the defaults always fit
    ks = split(K) if ksplit is None else ksplit
    nt = tiles(N, M, K) if nt is None else nt
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
