"""The MoE block after its router matmul in two launches: moe_route inside moe_experts.

    idx, w = moe_route(logits[rows], k, normalize)      # softmax over E, top-k, renormalise
    y = moe_experts(x, idx, w, experts, shared_gate, residual)

without the routing launch: launch 1 (gate+up+SwiGLU, a warp per token, expert slot and
4 outputs) has each warp pick its own expert by moe_route's algorithm, and launch 2
(down, weighted sum, shared expert, residual; a block per token and 16 output rows) has
one warp compute the token's ids and weights into shared memory (kernels/moe_block_src.py).
The routing arithmetic is moe_route's kernel's, statement for statement, and the rest
is moe_experts' bodies: the result is bit for bit moe_route's kernel followed by
moe_experts' kernels. At decode a step saves one launch a MoE layer (40 on Qwen3.5-35B-A3B),
and on the GPU also MLX's copy of the strided logits view that moe_route's row-contiguous
input costs where N > 1: here the logits are read through their strides.

Each token's warps recompute its top-k (launch 1: N * (k+1) * I/4 warps, each up to k
arg-max rounds over E/32 values a lane): cheap next to their weight rows at decode,
which is the only place this runs (N * k <= moe_experts.MAX_PAIRS).

route_rows [N] int32 (padding rows of a padded decode batch): token n routes by logits
row route_rows[n], read in the kernels (no gather launch). Padding rows thus take row
0's experts and weights; the plain path (moe.SparseMoeBlock.route) gives them row 0's
experts with their own weights. Nothing reads a padding row's output.
"""
from __future__ import annotations

import mlx.core as mx

import kernels.moe_experts as me
import kernels.moe_route as mr
from kernels.kernel_build import cuda_kernel, scalar
from kernels.moe_block_src import SOURCES
from kernels.stand_in import COUNT, StandInKernel

NAME = "moe_block"
# Token rows up to which the routing rides in the experts' launches. Each launch-1 warp
# redoes its token's top-k before it reads weights: at B=1 that costs less than the
# moe_route launch it saves (H200, session 16, `python3 -m engine.bench.kernel_time
# --batch 1,16`: gate+up 20.1 us against 18.1 + 2.8; B=1 decode 159 tok/s against 118),
# at B=16 more (gate+up 151 against 129 us, down 89 against 76: B=16 decode 905 tok/s
# against 966, under issue 23's 2x mlx-lm). Between 1 and 16 not measured: 4 is a guess
# on the safe side; past it the model routes, then runs moe_experts.
MAX_ROWS = 4
# Rows a warp (launch 1's gate/up outputs, launch 2's down rows): moe_experts' 4/2, not its
# 8/4. At B=1 fewer, fuller warps were slower here (H200, session 19, kernel_time: gate+up
# 19.7 -> 24.7 us, down 13.2 -> 17.4 at 8/4; 4 tokens of moe_experts gained 14 %).
RPW1 = 4
RPW2 = 2

_built: dict[str, tuple] = {}


def build(backend: str, sources: tuple[str, str, str], suffix: str = "") -> tuple:
    """(gate_up kernel, down kernel) of `sources` on `backend` (as moe_experts.build); every
    input read through its strides (the logits are a column slice of the joined router
    output; the weights are dense)."""
    header, gate_up, down = sources
    make = cuda_kernel if backend == "cuda" else mx.fast.metal_kernel
    return (
        make(name="tandem_moe_block_gate_up" + suffix,
             input_names=["x", "logits", "row_map", "w", "scales", "biases", "sw", "ss", "sb"],
             output_names=["h"], source=gate_up, header=header, ensure_row_contiguous=False),
        make(name="tandem_moe_block_down" + suffix,
             input_names=["h", "logits", "row_map", "w", "scales", "biases", "sw", "ss", "sb",
                          "gate", "residual"],
             output_names=["y"], source=down, header=header, ensure_row_contiguous=False))


def _get(backend: str):
    """(gate_up kernel, down kernel) on `backend`."""
    if backend == COUNT:
        return StandInKernel(NAME), StandInKernel(NAME)
    if backend not in _built:
        _built[backend] = build(backend, SOURCES[backend])
    return _built[backend]


def reference(x, logits, k: int, normalize: bool, experts: me.QuantExperts, shared_gate=None,
              residual=None, route_rows=None, shared_gate_col: int = 0):
    """Plain-mx float32: moe_route's reference on the logits rows (route_rows[n] for token
    n when given), then moe_experts' reference. [N, D] in x.dtype. As `kernel`: the
    logits the first E columns of `logits`, the gate column shared_gate_col."""
    logits = logits[:, :experts.gate_up[0].shape[0]]
    if shared_gate_col:
        shared_gate = shared_gate[:, shared_gate_col:shared_gate_col + 1]
    rows = logits if route_rows is None else logits[route_rows]                # [N, E]
    idx, scores = mr.reference(rows, k, normalize)                            # [N, k] each
    return me.reference(x, idx, scores, experts, shared_gate, residual)


def smem_extra(k: int) -> int:
    """Launch 2's shared bytes beside moe_experts' staged s * h: the k ids and weights."""
    return 8 * k


def applies(x, logits, k: int, experts: me.QuantExperts, shared_gate=None, residual=None,
            route_rows=None, shared_gate_col: int = 0) -> bool:
    """moe_route's contract on the logits (E % 32 == 0, E <= 1024, k <= 32; E the experts'
    count, the logits its first E columns: a wider array is the router's joined output)
    and moe_experts' on the rest (the shared gate column shared_gate_col of shared_gate);
    route_rows int32 [N]; at most MAX_ROWS token rows."""
    E = experts.gate_up[0].shape[0]
    if (x.ndim != 2 or logits.ndim != 2 or logits.shape[1] < E
            or not mr.applies_to(E, k) or logits.shape[0] != x.shape[0]
            or x.shape[0] > MAX_ROWS):
        return False
    if route_rows is not None and (route_rows.shape != (x.shape[0],)
                                   or route_rows.dtype != mx.int32):
        return False
    return me.fits(x, k, experts, shared_gate, residual, smem_extra(k), (RPW1, RPW2),
                   shared_gate_col=shared_gate_col)


def kernel(x, logits, k: int, normalize: bool, experts: me.QuantExperts, shared_gate=None,
           residual=None, route_rows=None, *, backend: str, shared_gate_col: int = 0) -> mx.array:
    """Launch on `backend`: y [N, D] in x.dtype, as `reference`. The logits are the first
    E columns of `logits` (E the experts'); the shared gate column shared_gate_col of
    shared_gate (the router's joined output may be both: no split node before)."""
    (N, D), hidden, gs = x.shape, experts.hidden, experts.group_size
    E = experts.gate_up[0].shape[0]
    shared = experts.shared is not None
    KK = k + shared
    gate_up, down = _get(backend)
    gu_weights, down_weights = me.weight_inputs(experts)
    routed = route_rows is not None
    rows = route_rows if routed else scalar(0, mx.int32)     # never read without ROWS
    (h,) = gate_up(
        inputs=[x, logits, rows, *gu_weights],
        template=[("D", D), ("I", hidden), ("K", k), ("E", E), ("R", gu_weights[0].shape[1]),
                  ("RS", gu_weights[3].shape[-2]), ("GS", gs), ("RPW", RPW1),
                  ("SHARED", shared), ("ROWS", routed), ("TILE_MAJOR", False),
                  ("STAGED", False)],
        grid=(N * KK * (hidden // RPW1) * 32, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(N * KK, hidden)], output_dtypes=[mx.float32])
    gate = (logits if shared_gate is None else shared_gate if shared_gate_col
            else shared_gate.reshape(N, 1))                                # unread without
    (y,) = down(
        inputs=[h, logits, rows, *down_weights, gate, x if residual is None else residual],
        template=[("OutT", x.dtype), ("D", D), ("I", hidden), ("K", k), ("E", E),
                  ("NORM", bool(normalize)), ("GS", gs), ("RPW", RPW2), ("SHARED", shared),
                  ("RES", residual is not None), ("ROWS", routed), ("SGC", shared_gate_col),
                  ("TILE_MAJOR", False),
                  ("STAGED_DOWN", False)],
        grid=(N * (D // (8 * RPW2)) * 256, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(N, D)], output_dtypes=[x.dtype])
    return y
