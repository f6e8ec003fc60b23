"""Feed-forward blocks: the SwiGLU MLP and the routed MoE with a gated shared expert.

Experts are stacked weights [E, out, in] run through ``mx.gather_mm`` (float)
or ``mx.gather_qmm`` (quantized): one op per projection whatever the number of
tokens or experts touched. With many (token, expert) pairs the pairs are sorted
by expert first, so each expert's weights are read once and contiguously.
At decode, 4-bit experts go to the model's kernel set instead (kernels/moe_experts.py):
the routed experts, the gated shared expert and the residual add in two launches, with
the routing inside them where kernels/moe_block.py applies (else the routing kernel first).
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn

from engine.models.elementwise import moe_output, swiglu
from engine.models.fused import fuse_linears
from engine.models.mlp import MLP
from engine.models.projection import project_added_normed
from engine.models.shapes import reshaped
from kernels.kernel_set import NO_KERNELS
from kernels.moe_experts import QuantExperts

# MLX 0.32's CUDA gather_mm is wrong with sorted_indices=True (max error ~5 on unit-scale
# inputs, float32 and bf16; gather_qmm is right: docs/bench/h200-gather-mm-sorted-indices.txt):
# there the sorted pairs go through the unsorted kernel, still grouped by expert.
_GATHER_MM_SORT_BROKEN = bool(getattr(mx, "cuda", None) and mx.cuda.is_available())

# Sorting costs two argsorts and a gather; it pays once the pairs outnumber this.
SORT_MIN_PAIRS = 64

# MLX's CUDA qmm_sm80 (gather_qmm's kernel for bf16/f16 inputs, N % 128 == 0) fills a
# 3-stage pipeline by loading 2 K tiles of max(64, group) before its loop, whatever K is
# (mlx/backend/cuda/device/qmm_sm80.cuh, "Prefetch beginning tiles", MLX 0.32.1 to
# 0.32.4 and main): where K fits in one tile it reads a tile past the end of x and of
# the last expert's weights. Those bytes are never used, so the result is right, but
# where the memory after the array is not mapped the read is an illegal access that
# kills the process's CUDA context (session 50's GPU suite: the MoE tune at load of a
# toy model, K = 64 = its group, and every later test of that worker). Only tiny models
# have such K (the real ones: 512..2048); on CUDA their experts go through dequantize
# and gather_mm instead (float32: the numbers gather_qmm gives, to rounding).
_QMM_READS_PAST_ONE_K_TILE = bool(getattr(mx, "cuda", None) and mx.cuda.is_available())


def reads_past_k(dims_in: int, dims_out: int, group_size: int, dtype: mx.Dtype) -> bool:
    """Whether MLX's CUDA qmm_sm80 takes this product and reads past K: bf16/f16 inputs,
    N % 128 == 0 (its conditions) and K in one of its K tiles (max(64, group size))."""
    return (dtype in (mx.bfloat16, mx.float16) and dims_out % 128 == 0
            and dims_in <= max(64, group_size))


def gathered_qmm(x: mx.array, weight: mx.array, scales: mx.array, biases: mx.array | None,
                 lhs: mx.array | None, idx: mx.array, group_size: int, bits: int,
                 mode: str, sorted_indices: bool) -> mx.array:
    """mx.gather_qmm with transposed weights, except on CUDA where qmm_sm80 would read
    past K (_QMM_READS_PAST_ONE_K_TILE): there the experts are dequantized to float32 and
    multiplied by gather_mm's unsorted kernel (_GATHER_MM_SORT_BROKEN)."""
    dims_in = weight.shape[-1] * 32 // bits
    if not (_QMM_READS_PAST_ONE_K_TILE
            and reads_past_k(dims_in, weight.shape[-2], group_size, x.dtype)):
        return mx.gather_qmm(x, weight, scales, biases, lhs_indices=lhs, rhs_indices=idx,
                             transpose=True, group_size=group_size, bits=bits, mode=mode,
                             sorted_indices=sorted_indices)
    f32 = None if biases is None else biases.astype(mx.float32)
    w = mx.dequantize(weight, scales.astype(mx.float32), f32, group_size, bits, mode=mode)
    out = mx.gather_mm(x.astype(mx.float32), w.swapaxes(-1, -2), lhs_indices=lhs,
                       rhs_indices=idx)
    return out.astype(x.dtype)


class SwitchLinear(nn.Module):
    """E stacked linear maps without bias; weight [E, out, in]."""

    def __init__(self, dims_in: int, dims_out: int, num_experts: int):
        super().__init__()
        bound = math.sqrt(1 / dims_in)
        self.weight = mx.random.uniform(-bound, bound, (num_experts, dims_out, dims_in))

    def __call__(self, x: mx.array, idx: mx.array, sorted_indices: bool) -> mx.array:
        lhs = batch_rows(x.shape[:-2])
        w = self.weight
        if w.dtype != mx.float32 and mx.default_device() == mx.cpu:
            # MLX's CPU gather_mm is float32 only (bf16 unquantized experts on Linux).
            out = mx.gather_mm(x.astype(mx.float32), w.astype(mx.float32).swapaxes(-1, -2),
                               lhs_indices=lhs, rhs_indices=idx, sorted_indices=sorted_indices)
            return out.astype(x.dtype)
        return mx.gather_mm(x, w.swapaxes(-1, -2), lhs_indices=lhs, rhs_indices=idx,
                            sorted_indices=sorted_indices and not _GATHER_MM_SORT_BROKEN)

    def to_quantized(self, group_size: int = 64, bits: int = 4, mode: str = "affine", **_):
        return QuantizedSwitchLinear.from_float(self.weight, group_size, bits, mode)


class QuantizedSwitchLinear(nn.Module):
    """Quantized stacked experts: weight/scales/biases as ``mx.quantize`` makes them."""

    def __init__(self, dims_in: int, dims_out: int, num_experts: int,
                 group_size: int = 64, bits: int = 4, mode: str = "affine"):
        super().__init__()
        self.group_size, self.bits, self.mode = group_size, bits, mode
        w = mx.zeros((num_experts, dims_out, dims_in))
        self.weight, self.scales, *biases = mx.quantize(w, group_size, bits, mode=mode)
        if biases:
            self.biases = biases[0]
        self.freeze()

    @classmethod
    def from_float(cls, weight: mx.array, group_size: int, bits: int, mode: str):
        E, dims_out, dims_in = weight.shape
        layer = cls(dims_in, dims_out, E, group_size, bits, mode)
        layer.weight, layer.scales, *biases = mx.quantize(weight, group_size, bits, mode=mode)
        if biases:
            layer.biases = biases[0]
        return layer

    def __call__(self, x: mx.array, idx: mx.array, sorted_indices: bool) -> mx.array:
        return gathered_qmm(x, self["weight"], self["scales"], self.get("biases"),
                            batch_rows(x.shape[:-2]), idx, self.group_size, self.bits,
                            self.mode, sorted_indices)


class SwitchGLU(nn.Module):
    """SwiGLU experts: x [N, D], idx [N, k] -> [N, k, D]."""

    def __init__(self, dims: int, hidden: int, num_experts: int):
        super().__init__()
        self.gate_proj = SwitchLinear(dims, hidden, num_experts)
        self.up_proj = SwitchLinear(dims, hidden, num_experts)
        self.down_proj = SwitchLinear(hidden, dims, num_experts)

    def fuse_projections(self) -> None:
        """After loading: the experts' gate and up stack into one [E, 2I, D] matrix."""
        fuse_linears(self, ("gate_proj", "up_proj"), "gate_up_proj")

    def __call__(self, x: mx.array, idx: mx.array) -> mx.array:
        N, k = idx.shape
        do_sort = idx.size >= SORT_MIN_PAIRS
        if do_sort:
            flat = idx.reshape(-1)                                 # [N*k]
            order = mx.argsort(flat)                               # pairs grouped by expert
            idx_in = flat[order]                                   # [N*k]
            x_in = x[order // k][:, None, :]                       # [N*k, 1, D]
        else:
            idx_in = idx                                           # [N, k]
            x_in = x[:, None, None, :]                             # [N, 1, 1, D]
        if "gate_up_proj" in self:                                 # one gathered matmul
            gate, up = self.gate_up_proj(x_in, idx_in, do_sort)  # [.., 1, I] each
        else:
            up = self.up_proj(x_in, idx_in, do_sort)          # [.., 1, I]
            gate = self.gate_proj(x_in, idx_in, do_sort)      # [.., 1, I]
        y = self.down_proj(swiglu(gate, up), idx_in, do_sort)    # [.., 1, D]
        if do_sort:
            y = y[mx.argsort(order)]                               # back to token order
        return y.reshape(N, k, -1)

    def quantized_experts(self) -> QuantExperts | None:
        """The joined gate+up and the down experts' arrays for kernels.moe_experts, when
        both are quantized alike (after fuse_projections), else None."""
        fused, down = self.get("gate_up_proj"), self.down_proj
        joined = getattr(fused, "joined", None)
        if not (isinstance(joined, QuantizedSwitchLinear)
                and isinstance(down, QuantizedSwitchLinear)
                and (joined.group_size, joined.bits, joined.mode)
                == (down.group_size, down.bits, down.mode)):
            return None
        parts = [tuple(m.get(k) for k in ("weight", "scales", "biases")) for m in (joined, down)]
        return QuantExperts(parts[0], parts[1], fused.parts.sizes[0], joined.group_size,
                            joined.bits, joined.mode)


def _quantized_mlp(mlp: MLP):
    """((gate_up, down) arrays, (hidden, group_size, bits, mode)) of a SwiGLU MLP whose
    joined gate+up and down are quantized alike, else None."""
    fused, down = mlp.get("gate_up_proj"), mlp.down_proj
    joined = getattr(fused, "joined", None)
    if not (isinstance(joined, nn.QuantizedLinear) and isinstance(down, nn.QuantizedLinear)):
        return None
    settings = (joined.group_size, joined.bits, joined.mode)
    if settings != (down.group_size, down.bits, down.mode):
        return None
    parts = tuple(tuple(m.get(k) for k in ("weight", "scales", "biases")) for m in (joined, down))
    return parts, (fused.parts.sizes[0], *settings)


def _as_uint32(idx: mx.array) -> mx.array:
    """Expert ids as uint32: moe_route's int32 ids are never negative, so the same bits
    viewed as uint32 (a view launches nothing where the item size is the same: MLX's
    View shares the buffer) rather than a cast kernel in every MoE layer of a chunk."""
    if idx.dtype == mx.int32:
        return idx.view(mx.uint32)
    return idx.astype(mx.uint32)        # a no-op where it is uint32 already


@lru_cache(maxsize=64)     # decode and chunk shapes; bounded
def batch_rows(batch_shape: tuple[int, ...]) -> mx.array:
    """The lhs indices gather_mm would build per call (each input matrix of the batch
    is its own row: arange over the batch dims), made once per shape instead."""
    rows = mx.arange(math.prod(batch_shape), dtype=mx.uint32).reshape(batch_shape)
    mx.eval(rows)
    return rows


class SparseMoeBlock(nn.Module):
    """Router softmax over all experts, top-k, experts, plus a sigmoid-gated shared expert."""

    def __init__(self, dims: int, hidden: int, shared_hidden: int, num_experts: int,
                 top_k: int, norm_topk_prob: bool):
        super().__init__()
        self.top_k, self.norm_topk_prob, self.num_experts = top_k, norm_topk_prob, num_experts
        self.gate = nn.Linear(dims, num_experts, bias=False)
        self.switch_mlp = SwitchGLU(dims, hidden, num_experts)
        self.shared_expert = MLP(dims, shared_hidden)
        self.shared_expert_gate = nn.Linear(dims, 1, bias=False)
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def fuse_projections(self) -> None:
        """After loading: experts' and shared expert's gate+up, and the router with the
        shared expert's gate (both read x, both 8-bit in shipped checkpoints)."""
        self.switch_mlp.fuse_projections()
        self.shared_expert.fuse_projections()
        fuse_linears(self, ("gate", "shared_expert_gate"), "gates")

    def route(self, logits: mx.array) -> tuple[mx.array, mx.array]:
        """Softmax over all experts, top-k, renormalised: (idx [N, k], scores [N, k])."""
        routed = self.kernel_set.moe_route(logits, self.top_k, self.norm_topk_prob)
        if routed is not None:             # one kernel instead of four ops
            return routed                  # int32, float32: cast only where read (experts)
        probs = mx.softmax(logits, axis=-1, precise=True)                    # [N, E]
        idx = mx.argpartition(probs, kth=-self.top_k, axis=-1)[:, -self.top_k:]  # [N, k]
        scores = mx.take_along_axis(probs, idx, axis=-1)                     # [N, k]
        if self.norm_topk_prob:
            scores = scores / scores.sum(axis=-1, keepdims=True)
        return idx, scores

    def gates_after_norm(self, x: mx.array, r: mx.array, norm: nn.RMSNorm
                         ) -> tuple[mx.array, mx.array, mx.array] | None:
        """(h = x + r, norm(h), the router's joined output on it) in one launch at one
        decode row (kernels/add_norm_qmv), for __call__'s `gates`; None: not here (the
        caller adds and normalises, and __call__ runs the router)."""
        if "gates" not in self:
            return None
        return project_added_normed(self.kernel_set, self.gates.joined, x, r, norm)

    def __call__(self, x: mx.array, residual: mx.array | None = None,
                 route_rows: mx.array | None = None, gates: mx.array | None = None) -> mx.array:
        """x [.., D] -> the block's output [.., D], plus residual when given (one op).
        route_rows [N]: the row whose experts each row uses (padding rows: row 0's).
        gates: the router's joined output on x, when gates_after_norm made it."""
        shape = x.shape
        x = reshaped(x, -1, shape[-1])                                       # [N, D]
        residual = None if residual is None else reshaped(residual, -1, shape[-1])
        experts = self._block_experts()
        if "gates" in self:      # the router's joined output: logits, then the shared gate
            if gates is None:
                gates = self.gates.joined_output(x)                          # [N, E + 1 (+ pad)]
            logits = shared_gate = gates
            gate_col = self.gates.parts.starts[1]
        else:
            logits, shared_gate, gate_col = self.gate(x), self.shared_expert_gate(x), 0
        # Decode: the routing inside the experts' two launches (kernels/moe_block.py), which
        # read the logits and the shared gate as columns of the joined output (no Split
        # node a layer)
        out = None if experts is None else self.kernel_set.moe_block(
            x, logits, self.top_k, self.norm_topk_prob, experts, shared_gate, residual,
            route_rows, shared_gate_col=gate_col)
        if out is None:
            if gate_col:
                logits, shared_gate = self.gates.split(logits)               # [N, E], [N, 1]
            out = self._routed_block(x, logits, shared_gate, residual, route_rows)
        return reshaped(out, *shape)

    def _routed_block(self, x, logits, shared_gate, residual, route_rows) -> mx.array:
        """Route, then the experts: their kernel (with the shared expert and residual) or
        the plain path."""
        idx, scores = self.route(logits)                                     # [N, k] each
        if route_rows is not None:
            idx = idx[route_rows]          # padding rows read no expert row 0 does not
        out = self._kernel_block(x, idx, scores, shared_gate, residual)
        if out is None:
            y = self.experts(x, idx, scores)                                 # [N, D]
            out = moe_output(y, self.shared_expert(x), shared_gate,
                             mx.array(0, y.dtype) if residual is None else residual)
        return out

    def _block_experts(self) -> QuantExperts | None:
        """The routed experts with the shared one as the kernels take them (QuantExperts),
        or None: they are not quantized, or not alike."""
        routed = self.switch_mlp.quantized_experts()
        shared = _quantized_mlp(self.shared_expert)
        if routed is None or shared is None:
            return None
        (gate_up, down), settings = shared
        if settings != (routed.hidden, routed.group_size, routed.bits, routed.mode):
            return None
        return replace(routed, shared=(gate_up, down))

    def _kernel_block(self, x, idx, scores, shared_gate, residual) -> mx.array | None:
        """The block after its router in two launches (kernels/moe_experts.py: the routed
        experts, the gated shared expert and the residual add), or None: no kernel here."""
        experts = self._block_experts()
        if experts is None:
            return None
        return self.kernel_set.moe_experts(x, idx, scores, experts, shared_gate, residual)

    def experts(self, x: mx.array, idx: mx.array, scores: mx.array) -> mx.array:
        """The routed experts' weighted sum [N, D]: two kernel launches at decode
        (kernels/moe_experts.py) where they apply, else the gathered matmuls."""
        quantized = self.switch_mlp.quantized_experts()
        if quantized is not None:          # reads the router's int32 / float32 as they are
            y = self.kernel_set.moe_experts(x, idx, scores, quantized)
            if y is None:                  # a chunk's many pairs, grouped by expert (CUDA)
                y = self.kernel_set.moe_grouped(x, idx, scores, quantized)
            if y is not None:
                return y
        return self.gathered_experts(x, idx, scores)

    def gathered_experts(self, x: mx.array, idx: mx.array, scores: mx.array) -> mx.array:
        """The plain path of `experts`: MLX's gathered matmuls, then the weighted sum."""
        # gather_(q)mm takes uint32 indices (made once here, not in each of its calls);
        # the weighted sum runs in x's dtype. Both no-ops after the plain router.
        y = self.switch_mlp(x, _as_uint32(idx))                              # [N, k, D]
        return (scores.astype(x.dtype)[:, None, :] @ y)[:, 0]   # weighted sum, one matmul
