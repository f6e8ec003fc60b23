"""Routed experts at decode as gathered matrix-vector products, in two launches.

For each token n and its k chosen experts e = idx[n, j] with weights s = scores[n, j]
(4-bit affine experts, the gate and up projections joined along the output axis):

    h[n, j] = silu(Wg[e] x[n]) * (Wu[e] x[n])          # launch 1: gate+up, SwiGLU  [N, k, I]
    y[n]    = sum_j s[n, j] * Wd[e] h[n, j]            # launch 2: down, weighted sum  [N, D]

With the block's shared expert (same width and quantization) it is one more "expert"
j = k of every token with weight sigmoid(shared_gate[n]), and a residual is added in
launch 2: the whole MoE block after its router in two launches (the plain path runs
the shared expert's two matmuls, its SwiGLU and the output's add on top).

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

from kernels.kernel_build import cuda_kernel
from kernels.moe_experts_src import _SOURCES
from kernels.stand_in import COUNT, StandInKernel

NAME = "moe_experts"
# Pairs (token, expert) up to which the kernel runs: decode batches. Each pair reads
# its expert's rows (1.5 MB at the real shapes); the sorted gathered matmul reads each
# distinct expert once, so it wins once many tokens share experts. H200, real shapes,
# random routing (python -m kernels.bench.moe_experts, session 7): the kernel is 1.85x
# the plain path at 8 pairs, 1.13x at 128, 1.04x at 256, 0.92x at 384 and 512. In the
# engine, B=32 decode (256 pairs) took 27-28 ms a step at 256 against 32-34 ms at 128
# (the sorted path's ~560 launches more; session 8, docs/bench/h200-session8-2026-12-02.txt).
MAX_PAIRS = 256
# Past MAX_PAIRS the kernel runs a prompt chunk's experts up to the pairs measured faster
# at load (KernelSet.experts_to; kernels/moe_grouped_tune.py, engine/loading/grouped_tune.py):
# session 19's rows a warp made it 1.31-1.34x MLX's gathered path at 256-4,096 pairs on the
# H200 (session 24, `python -m kernels.bench.moe_grouped`), where session 7's was 0.86-0.92x.
# False (a bench's --moe-max-pairs): MAX_PAIRS alone decides, nothing is measured.
MEASURED_RANGE = True
# Rows a warp: more rows reuse a lane's chunks of x (launch 1) and a block's staged s * h
# (launch 2) over more weight bytes. H200, real shapes, both launches with the shared
# expert (docs/bench/h200-session19-diag_moe.py): 8/4 against 4/2 took N=4 from 101 to
# 87 us, N=16 from 261 to 215, N=32 from 476 to 393, N=1 58 to 57; 16/2 was slower.
RPW1 = 8          # gate/up outputs per warp (launch 1)
RPW2 = 4          # down rows per warp (launch 2); 8 warps a block
SMEM_BYTES = 32 * 1024   # launch 2's staged s * h: within Metal's 32 KB threadgroup memory
# Launch 1 reads each routed expert's rows once for all the tokens that chose it (the first
# such token's warps run the others', kernels/moe_experts_src.py DEDUPE; CUDA only) from
# this many (token, expert) pairs. None: never. Measured slower on the H100 (session 38,
# `python -m kernels.bench.moe_experts_ab --order`: 0.91x at N=4, 0.85x at N=16, 0.80x at
# N=32): the owner's warps run the repeats one after another while the others sit idle, and
# at B=16 only ~20 % of the 128 pairs repeat an expert. Off.
DEDUPE_FROM_PAIRS: int | None = None
# Both launches' grid in row-tile-major order (kernels/moe_experts_src.py TILE_MAJOR; CUDA
# only): the pairs that share an expert read its rows at about the same time, the later
# ones from L2, with no token waiting on another's. The same floats. H100, session 38
# (`moe_experts_ab --order`): N=16 134.0 -> 130.7 us, N=32 235.5 -> 224.5 us, N=4 0.99x.
TILE_MAJOR = True
# Launch 1 copies each lane's pieces of the warp's weight rows into shared memory with
# cp.async before using them (kernels/moe_experts_src.py STAGED; CUDA only; 4 warps a block,
# 16 KB of shared memory a warp at the real shapes): every byte of a warp's tile in flight
# at once without holding registers, where loads into registers keep ~12 of its 32 pieces
# in flight (ptxas' choice, session 38). The same floats. Off: slower on an H100 (session
# 39, `python -m kernels.bench.moe_experts_ab --staged`: 0.95x at N=16, 0.89-0.93x at N=32;
# its GPU tests pass).
STAGED = False
STAGED_WARPS = 4          # warps a block when STAGED
# Launch 2 alike (STAGED_DOWN): each lane's pieces of its warp's down rows copied into shared
# memory before the block stages s * h, so their latency runs under that staging and its
# barrier (10 KB a warp, 80 KB a block at the real shapes). The same floats. Off: 0.93-0.96x
# on an H100 (session 39, `moe_experts_ab --staged`).
STAGED_DOWN = False
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
    # The shared expert alike: (gate_up [>= 2I, D/8], down [D, I/8]) (w, scales, biases)
    shared: tuple[tuple, tuple] | None = None


_built: dict[str, tuple] = {}
# Each launch's MLX kernel: name, inputs, output, whether MLX copies inputs row-contiguous
# (launch 2 reads strided idx, scores, gate and residual as they are: the shared gate is a
# column of the joined router output; h and the weights are dense)
_LAUNCHES = {
    "gate_up": ("tandem_moe_gate_up", ["x", "idx", "w", "scales", "biases", "sw", "ss", "sb"],
                "h", True),
    "down": ("tandem_moe_down", ["h", "idx", "scores", "w", "scales", "biases", "sw", "ss",
                                 "sb", "gate", "residual"], "y", False),
}


def _make(backend: str, part: str, source: str, header: str, suffix: str = "",
          shared_memory: int = 0):
    name, inputs, output, contiguous = _LAUNCHES[part]
    extra = {"shared_memory": shared_memory} if shared_memory else {}
    make = cuda_kernel if backend == "cuda" else mx.fast.metal_kernel
    return make(name=name + suffix, input_names=inputs, output_names=[output], source=source,
                header=header, ensure_row_contiguous=contiguous, **extra)


def build(backend: str, sources: tuple[str, str, str], suffix: str = "") -> tuple:
    """(gate_up kernel, down kernel) of `sources` (header, gate_up body, down body) on
    `backend`; suffix ends their names (kernels/bench/moe_experts_ab.py: another revision's
    sources beside these)."""
    header, gate_up, down = sources
    return (_make(backend, "gate_up", gate_up, header, suffix),
            _make(backend, "down", down, header, suffix))


def _get(backend: str):
    """(gate_up kernel, down kernel) on `backend`."""
    if backend == COUNT:
        return StandInKernel(NAME), StandInKernel(NAME)
    if backend not in _built:
        _built[backend] = build(backend, _SOURCES[backend])
    return _built[backend]


# STAGED kernels by launch and shared memory in bytes (MLX fixes it when it builds a kernel)
_staged_built: dict[tuple[str, int], object] = {}


def staged_bytes(D: int) -> int:
    """STAGED launch 1's shared memory a block: each warp's 2 RPW1 rows of 16-byte pieces,
    a piece a lane a chunk."""
    return STAGED_WARPS * -(-(D // 32) // 32) * 2 * RPW1 * 32 * 16


def _staged(part: str, smem: int):
    """Launch `part` ('gate_up' or 'down') built with `smem` bytes of dynamic shared memory
    (STAGED, STAGED_DOWN; CUDA)."""
    if (part, smem) not in _staged_built:
        header, gate_up, down = _SOURCES["cuda"]
        _staged_built[part, smem] = _make("cuda", part, gate_up if part == "gate_up" else down,
                                          header, "_staged", smem)
    return _staged_built[part, smem]


def _dequantized(parts, group_size: int, idx=None) -> mx.array:
    """Float32 matrices (scale * q + bias in float32: bf16 scales would round each weight
    to bf16): the chosen experts' [N, k, rows, cols], or the one matrix without idx."""
    w, s, b = parts if idx is None else (p[idx] for p in parts)
    return mx.dequantize(w, s.astype(mx.float32), b.astype(mx.float32), group_size=group_size,
                         bits=4)


def _swiglu_rows(gu: mx.array, hidden: int) -> mx.array:
    gate, up = gu[..., :hidden], gu[..., hidden:2 * hidden]
    return gate * mx.sigmoid(gate) * up


def reference(x, idx, scores, experts: QuantExperts, shared_gate=None, residual=None):
    """Plain-mx float32: dequantize the chosen experts and run them; with experts.shared,
    plus sigmoid(shared_gate) times the shared expert; plus residual. [N, D] in x.dtype."""
    hidden, gs = experts.hidden, experts.group_size
    xf = x.astype(mx.float32)                                               # [N, D]
    gu = (_dequantized(experts.gate_up, gs, idx) @ xf[:, None, :, None])[..., 0]  # [N, k, R]
    h = _swiglu_rows(gu, hidden)                                            # [N, k, I]
    y = (_dequantized(experts.down, gs, idx) @ h[..., None])[..., 0]        # [N, k, D]
    out = (scores.astype(mx.float32)[..., None] * y).sum(axis=1)           # [N, D]
    if experts.shared is not None:
        sgu, sdown = experts.shared
        hs = _swiglu_rows(xf @ _dequantized(sgu, gs).T, hidden)            # [N, I]
        gate = mx.sigmoid(shared_gate.astype(mx.float32).reshape(-1, 1))   # [N, 1]
        out = out + gate * (hs @ _dequantized(sdown, gs).T)
    if residual is not None:
        out = out + residual.astype(mx.float32)
    return out.astype(x.dtype)


def _quantized_alike(parts, rows_at_least: int, cols: int, like) -> bool:
    w = parts[0]
    return (len(parts) == 3 and parts[2] is not None and w.dtype == mx.uint32
            and w.shape[-2] >= rows_at_least and w.shape[-1] * 8 == cols
            and all(p.dtype == q.dtype for p, q in zip(parts[1:], like[1:])))


def applies(x, idx, experts: QuantExperts, shared_gate=None, residual=None,
            max_pairs: int | None = None) -> bool:
    """Shapes and formats the kernel handles, up to max_pairs (token, expert) pairs
    (None: MAX_PAIRS); the caller's plain path takes the rest."""
    return (x.ndim == 2 and idx.ndim == 2 and idx.shape[0] == x.shape[0]
            and fits(x, idx.shape[1], experts, shared_gate, residual, max_pairs=max_pairs))


def fits(x, K: int, experts: QuantExperts, shared_gate=None, residual=None,
         smem_extra: int = 0, rows: tuple[int, int] | None = None,
         max_pairs: int | None = None, shared_gate_col: int = 0) -> bool:
    """`applies` for K experts a token; smem_extra: launch 2's shared bytes beside s * h
    (kernels/moe_block.py's routed ids and weights); rows: the launches' rows a warp;
    shared_gate_col: the shared gate's column of shared_gate [N, > col] (0: [N, 1] or
    [N]). rows None: RPW1 and RPW2 as they are now (a bench's --moe-rows sets them)."""
    rpw1, rpw2 = rows or (RPW1, RPW2)
    if x.ndim != 2:
        return False
    (N, D), hidden, gs = x.shape, experts.hidden, experts.group_size
    gw, dw = experts.gate_up[0], experts.down[0]
    KK = K + (experts.shared is not None)
    ok = (experts.bits == 4 and experts.mode == "affine" and gs in GROUP_SIZES
          and all(len(p) == 3 and p[2] is not None for p in (experts.gate_up, experts.down))
          and gw.dtype == mx.uint32 and dw.dtype == mx.uint32
          and 1 <= N * K <= (max_pairs or MAX_PAIRS) and D % 32 == 0 and hidden % 32 == 0
          and D % gs == 0 and hidden % gs == 0 and hidden % rpw1 == 0
          and D % (8 * rpw2) == 0
          and KK * hidden // 32 * 36 * 4 + smem_extra <= SMEM_BYTES
          and gw.ndim == 3 and gw.shape[2] * 8 == D and gw.shape[1] >= 2 * hidden
          and dw.ndim == 3 and dw.shape[1] == D and dw.shape[2] * 8 == hidden
          and (residual is None or residual.shape == (N, D)))
    if not ok or experts.shared is None:
        return ok
    sgu, sdown = experts.shared
    gate_ok = shared_gate is not None and (
        shared_gate.shape in ((N, 1), (N,)) if shared_gate_col == 0 else
        shared_gate.ndim == 2 and shared_gate.shape[0] == N
        and shared_gate.shape[1] > shared_gate_col)
    return (gate_ok
            and _quantized_alike(sgu, 2 * hidden, D, experts.gate_up) and sgu[0].ndim == 2
            and _quantized_alike(sdown, D, hidden, experts.down) and sdown[0].shape[0] == D
            and sdown[0].ndim == 2)


def weight_inputs(experts: QuantExperts) -> tuple[list, list]:
    """The launches' weight inputs: gate_up (w, scales, biases) then the shared expert's,
    and the same of down. Without a shared expert its inputs are stand-ins (the routed
    arrays) that the kernels never read."""
    own = experts.shared if experts.shared is not None else (experts.gate_up, experts.down)
    return [*experts.gate_up, *own[0]], [*experts.down, *own[1]]


def dedupes(backend: str, N: int, K: int) -> bool:
    """Whether launch 1 reads a routed expert once for all its tokens (DEDUPE_FROM_PAIRS):
    CUDA, more than one token, K <= 32 (a lane a slot finds a token's slot)."""
    return (backend == "cuda" and DEDUPE_FROM_PAIRS is not None and N > 1 and K <= 32
            and N * K >= DEDUPE_FROM_PAIRS)


def tile_major(backend: str) -> bool:
    """Whether both launches run their grid row-tile-major (TILE_MAJOR: CUDA only)."""
    return backend == "cuda" and TILE_MAJOR


# STAGED's shared memory a block at most: within every sm_80+ GPU's opt-in limit (an A100's
# 163 KB; the real shapes need 64 KB), else the plain launch 1.
STAGED_MAX_BYTES = 160 * 1024


def staged(backend: str, D: int) -> bool:
    """Whether launch 1 stages its weight rows in shared memory (STAGED: CUDA only)."""
    return backend == "cuda" and STAGED and staged_bytes(D) <= STAGED_MAX_BYTES


def staged_down_bytes(K: int, hidden: int, shared: bool) -> int:
    """STAGED_DOWN launch 2's shared memory a block: 8 warps, each RPW2 rows of a lane's
    chunks (KK * hidden / 32 chunks a row over 32 lanes), 16 bytes a piece."""
    chunks = (K + shared) * (hidden // 32)
    return 8 * -(-chunks // 32) * RPW2 * 32 * 16


def staged_down(backend: str, K: int, hidden: int, shared: bool) -> bool:
    """Whether launch 2 stages its weight rows in shared memory (STAGED_DOWN: CUDA only),
    beside its s * h (SMEM_BYTES at most)."""
    return (backend == "cuda" and STAGED_DOWN
            and staged_down_bytes(K, hidden, shared) + SMEM_BYTES <= STAGED_MAX_BYTES)


def kernel(x, idx, scores, experts: QuantExperts, shared_gate=None, residual=None, *,
           backend: str) -> mx.array:
    """Launch on `backend`: y [N, D] in x.dtype, as `reference`."""
    (N, D), K, hidden, gs = x.shape, idx.shape[1], experts.hidden, experts.group_size
    shared = experts.shared is not None
    KK = K + shared
    gate_up, down = _get(backend)
    stage = staged(backend, D)
    if stage:
        gate_up = _staged("gate_up", staged_bytes(D))
    gu_weights, down_weights = weight_inputs(experts)
    (h,) = gate_up(
        inputs=[x, idx, *gu_weights],
        template=[("D", D), ("I", hidden), ("K", K), ("R", gu_weights[0].shape[1]),
                  ("RS", gu_weights[3].shape[-2]), ("GS", gs), ("RPW", RPW1),
                  ("SHARED", shared), ("DEDUPE", dedupes(backend, N, K)),
                  ("TILE_MAJOR", tile_major(backend)), ("STAGED", stage)],
        grid=(N * KK * (hidden // RPW1) * 32, 1, 1),
        threadgroup=(32 * STAGED_WARPS if stage else 256, 1, 1),
        output_shapes=[(N * KK, hidden)], output_dtypes=[mx.float32])
    gate = scores if shared_gate is None else shared_gate.reshape(N, 1)
    stage_down = staged_down(backend, K, hidden, shared)
    if stage_down:
        down = _staged("down", staged_down_bytes(K, hidden, shared))
    (y,) = down(
        inputs=[h, idx, scores, *down_weights, gate, x if residual is None else residual],
        template=[("OutT", x.dtype), ("D", D), ("I", hidden), ("K", K), ("GS", gs),
                  ("RPW", RPW2), ("SHARED", shared), ("RES", residual is not None),
                  ("SGC", 0), ("TILE_MAJOR", tile_major(backend)),
                  ("STAGED_DOWN", stage_down)],
        grid=(N * (D // (8 * RPW2)) * 256, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(N, D)], output_dtypes=[x.dtype])
    return y
