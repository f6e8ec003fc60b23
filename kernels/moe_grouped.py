"""The routed experts of a prompt chunk, grouped by expert: each expert's weights read once
a launch. CUDA only (kernels/backend.py, `CUDA_ONLY`).

A chunk of T tokens routes T * k (token, expert) pairs. MLX 0.32's CUDA `gather_qmm` takes
the sorted pairs (engine/models/moe.SwitchGLU) as one tiled GEMM each (`qmm_sm80`, the
rows of a pair padded to a 16-row tile), so every pair reads its expert's 1.5 MB again:
on the H200 the plain path took 863 us a layer at 64 tokens and 1,541 at 128 (session 7,
docs/PERFORMANCE.md, "The experts kernel's range"), against ~100 us to read all 256
experts once; kernels/moe_experts.py, one warp a pair, is no better there. Metal's
`gather_qmm` reads each expert once for sorted pairs already (`gather_qmm_rhs`).

Two launches over the pairs sorted by expert (`order`, from one argsort): gate+up and
SwiGLU, then down with each pair's weight, written at the pair's token-major row; the sum
over a token's k pairs is one reduction after. The shared expert and the residual stay
with the caller (engine/models/moe.py). Contract: 4-bit affine experts
(`moe_experts.QuantExperts`), the group size in (32, 64, 128), D and the hidden I whole
groups.

On the tensor cores (kernels/moe_grouped_src.py has the detail): a block is an expert and
a tile of its rows (launch 1: 8 warps of 16 gate rows and their 16 up rows, 128 gate rows
a block at I = 512; launch 2: 8 warps of 32 down rows, 256 a block at D = 2048); it takes
the expert's pairs 16 at a time (a pass: two tiles of 8, the second skipped when empty),
stages their x (or h) rows in shared memory in the MMA's fragment order, 512 values of K
at a time (32 KB), and each warp runs its rows through `mma.sync.aligned.m16n8k8` .tf32
with float32 sums: weights as A (16 rows x 8 of K), tokens as B (8 of K x 8 tokens). Each
weight is unpacked once a pass, by the lane that holds it in the fragment, from its packed
word to the exact integer 0..15 (two instructions); each group's scale and bias are
applied after its MMAs in float32 (s * sum x q + b * sum x). bf16 or fp16 x is exact in
tf32; float32 x and h go in as two tf32 parts (2**-22), so nothing is rounded past float32
sums. The previous version (a warp per 2 gate rows, every pair's x through every lane's
weights on the CUDA cores) measured 0.43-0.50x of the plain path on the H200 (session 24).

NOT YET RUN ON A GPU. Checked without one: its body on the CPU with the MMA emulated by the
PTX ISA's fragment tables (kernels/bench/cuda_on_cpu_grouped.py; 0.004-0.022 of a float32
tolerance, planted layout faults 1e5x over it) and compiled by nvcc for sm_90a
(kernels/bench/nvcc_check.py: 99 and 95 registers in bf16, 118 and 94 in float32, no
spills). Its CUDA correctness is the GPU tests' (tests/kernels/test_moe_grouped.py) and the
self-test's, its speed the load-time measure's (kernels/moe_grouped_tune.py).

Runs where a chunk's pairs number at least what the model's kernel set says
(`KernelSet.grouped_from`: measured against the plain path on this GPU at load,
kernels/moe_grouped_tune.py), or MIN_PAIRS where a bench forces it (`--moe-grouped-from`).
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import cuda_kernel
from kernels.moe_experts import GROUP_SIZES, QuantExperts
from kernels.moe_experts import reference as experts_reference
from kernels.moe_grouped_src import CUDA_DOWN, CUDA_GATE_UP, CUDA_HEADER
from kernels.stand_in import COUNT, StandInKernel

NAME = "moe_grouped"
MIN_PAIRS: int | None = None    # forced: the pairs from which it runs; None: as measured
NT = 2            # token tiles of 8 a pass: an expert's first 16 pairs in one pass
MAX_CHUNK = 512   # values of K staged at once: NT * 8 tokens * 512 floats = 32 KB shared
MAX_WARPS = 8     # warps a block

_built: dict[str, tuple] = {}


def _get(backend: str):
    """(gate_up kernel, down kernel) on `backend`."""
    if backend == COUNT:
        return StandInKernel(NAME), StandInKernel(NAME)
    if backend != "cuda":
        raise ValueError(f"{NAME} has a CUDA source only, not {backend!r}")
    if backend not in _built:
        _built[backend] = (
            cuda_kernel(name="tandem_moe_grouped_gate_up",
                                input_names=["x", "order", "eid", "w", "scales", "biases"],
                                output_names=["h", "seg"], source=CUDA_GATE_UP,
                                header=CUDA_HEADER),
            cuda_kernel(name="tandem_moe_grouped_down",
                                input_names=["h", "order", "seg", "scores", "w", "scales",
                                             "biases"],
                                output_names=["y"], source=CUDA_DOWN, header=CUDA_HEADER))
    return _built[backend]


def reference(x, idx, scores, experts: QuantExperts) -> mx.array:
    """Plain-mx float32: the routed experts' weighted sum [N, D] in x.dtype."""
    return experts_reference(x, idx, scores, experts)


def _chunk(k: int, step: int) -> int:
    """The values of K staged at once: the largest multiple of `step` (a step's values)
    that divides k, up to MAX_CHUNK."""
    return max(c for c in range(step, min(k, MAX_CHUNK) + 1, step) if k % c == 0)


def _warps(rows: int) -> int:
    """Warps a block for `rows` fragment row tiles an expert: up to MAX_WARPS, dividing it."""
    return next(w for w in (8, 4, 2, 1) if w <= MAX_WARPS and rows % w == 0)


def plan(D: int, hidden: int, group_size: int) -> dict:
    """The two launches' template constants and block counts per expert (the emulator and
    nvcc_check launch the same): launch 1 a warp per 16 gate rows and their 16 up rows,
    launch 2 a warp per MT x 16 down rows; pairs 8 * NT a pass; K staged in chunks."""
    step = 64 if group_size % 64 == 0 else 32                  # a step's values of K
    wpb1 = _warps(hidden // 16)
    mt = 2 if D % 32 == 0 else 1
    wpb2 = _warps(D // (16 * mt))
    return {"gate_up": [("NT", NT), ("KC", _chunk(D, step)), ("WPB", wpb1)],
            "down": [("NT", NT), ("KC", _chunk(hidden, step)), ("WPB", wpb2), ("MT", mt)],
            "blocks": (hidden // (16 * wpb1), D // (16 * mt * wpb2)),
            "threads": (32 * wpb1, 32 * wpb2)}


def applies(x, idx, experts: QuantExperts, min_pairs: int | None = None) -> bool:
    """Shapes and formats the kernel handles, at or past min_pairs (MIN_PAIRS when None)
    pairs; the caller's plain path takes the rest."""
    least = MIN_PAIRS if min_pairs is None else min_pairs
    if least is None or least < 1 or x.ndim != 2 or idx.ndim != 2 or idx.shape[0] != x.shape[0]:
        return False
    (N, D), K, hidden, gs = x.shape, idx.shape[1], experts.hidden, experts.group_size
    gw, dw = experts.gate_up[0], experts.down[0]
    return (N * K >= least and experts.bits == 4 and experts.mode == "affine"
            and gs in GROUP_SIZES and D % gs == 0 and hidden % gs == 0
            and all(len(p) == 3 and p[2] is not None for p in (experts.gate_up, experts.down))
            and gw.dtype == mx.uint32 and dw.dtype == mx.uint32
            and gw.ndim == 3 and gw.shape[2] * 8 == D and gw.shape[1] >= 2 * hidden
            and dw.ndim == 3 and dw.shape[1] == D and dw.shape[2] * 8 == hidden)


def kernel(x, idx, scores, experts: QuantExperts, *, backend: str) -> mx.array:
    """Launch on `backend`: y [N, D] in x.dtype, as `reference`. The pairs are sorted by
    expert here (an argsort and a gather); the sum over a token's k pairs is one reduction."""
    (N, D), K, hidden, gs = x.shape, idx.shape[1], experts.hidden, experts.group_size
    E = experts.gate_up[0].shape[0]
    flat = idx.reshape(-1)
    order = mx.argsort(flat)                                               # [P] uint32
    eid = flat[order]                                                      # [P] ascending
    gate_up, down = _get(backend)
    p = plan(D, hidden, gs)
    (b1, b2), (t1, t2) = p["blocks"], p["threads"]
    h, seg = gate_up(
        inputs=[x, order, eid, *experts.gate_up],
        template=[("D", D), ("I", hidden), ("K", K), ("R", experts.gate_up[0].shape[1]),
                  ("GS", gs)] + p["gate_up"],
        grid=(E * b1 * t1, 1, 1), threadgroup=(t1, 1, 1),
        output_shapes=[(N * K, hidden), (E, 2)], output_dtypes=[mx.float32, mx.int32])
    (y,) = down(
        inputs=[h, order, seg, scores.reshape(-1).astype(mx.float32), *experts.down],
        template=[("D", D), ("I", hidden), ("GS", gs)] + p["down"],
        grid=(E * b2 * t2, 1, 1), threadgroup=(t2, 1, 1),
        output_shapes=[(N * K, D)], output_dtypes=[mx.float32])
    return y.reshape(N, K, D).sum(axis=1).astype(x.dtype)
