"""The layers a sharded model adds around the family's own: one collective per block.

A block's input is the same on every rank (embeddings and norms are replicated, and
an all_sum hands every rank the same bits). Attention/mixer heads, MLP columns and
experts are split, so each rank's block output is a partial sum: ``AllSum`` adds the
ranks' parts after the block's last projection. The MoE block sums its routed
experts and its shared expert in one all_sum. The vocabulary head is split by rows
and its parts are gathered (``GatheredHead``), so every rank has the full logits.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from engine.distributed.traffic import TRAFFIC
from engine.models.elementwise import moe_output
from engine.models.moe import SparseMoeBlock, SwitchGLU


class AllSum(nn.Module):
    """A row-parallel projection: this rank's columns of the weight, then the sum over
    ranks. (A bias is held by rank 0 only: it is added once.)"""

    def __init__(self, inner: nn.Module, group):
        super().__init__()
        self.inner = inner
        self.group = group

    def __call__(self, x: mx.array) -> mx.array:
        part = self.inner(x)                                                 # [.., H]
        TRAFFIC.all_sum(part.nbytes, self.group.size())
        return mx.distributed.all_sum(part, group=self.group)


class GatheredHead(nn.Module):
    """The vocabulary head split by rows: each rank computes its [.., V/N] logits,
    all_gather joins them (rows padded to a multiple of N are cut)."""

    def __init__(self, inner: nn.Module, vocab_size: int, group):
        super().__init__()
        self.inner = inner
        self.vocab_size = vocab_size
        self.group = group

    def __call__(self, h: mx.array) -> mx.array:
        shape = h.shape
        part = self.inner(h.reshape(-1, shape[-1]))                          # [M, Vl]
        M, Vl = part.shape
        n = self.group.size()
        TRAFFIC.all_gather(part.nbytes, n)
        joined = mx.distributed.all_gather(part, group=self.group)            # [n*M, Vl]
        logits = joined.reshape(n, M, Vl).transpose(1, 0, 2).reshape(M, n * Vl)
        return logits[:, :self.vocab_size].reshape(*shape[:-1], self.vocab_size)


class ShardedMoeBlock(SparseMoeBlock):
    """Experts first_expert .. first_expert+num_local-1 of a SparseMoeBlock, with the
    shared expert split by its hidden width. Every rank routes every token (the router
    is replicated and its input identical, so all ranks pick the same experts); a
    (token, expert) pair whose expert lives elsewhere gets score 0 here. One all_sum
    adds the ranks' experts and shared-expert parts.

    The pairs of other ranks still run through the gathered matmul (at a clipped
    expert index: no dynamic shapes without a host sync), so prefill computes every
    pair on every rank; decode reads only this rank's experts' weights.
    """

    def __init__(self, dims: int, hidden: int, shared_hidden: int, num_experts: int,
                 top_k: int, norm_topk_prob: bool, first_expert: int, num_local: int,
                 group):
        super().__init__(dims, hidden, shared_hidden, num_experts, top_k, norm_topk_prob)
        self.switch_mlp = SwitchGLU(dims, hidden, num_local)
        self.first_expert, self.num_local = first_expert, num_local
        self.group = group

    def __call__(self, x: mx.array, residual: mx.array | None = None,
                 route_rows: mx.array | None = None, gates: mx.array | None = None) -> mx.array:
        """As SparseMoeBlock's; gates: the router's joined output on x, when
        gates_after_norm made it (kernels/add_norm_qmv at one decode row)."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])                                         # [N, D]
        if "gates" in self:                                                  # [N, E], [N, 1]
            logits, shared_gate = self.gates(x) if gates is None else self.gates.split(gates)
        else:
            logits, shared_gate = self.gate(x), self.shared_expert_gate(x)
        idx, scores = self.route(logits)                                     # [N, k] each
        if route_rows is not None:
            idx = idx[route_rows]
        local = idx.astype(mx.int32) - self.first_expert                     # [N, k]
        own = (local >= 0) & (local < self.num_local)
        scores = mx.where(own, scores, mx.array(0, scores.dtype))
        local = mx.clip(local, 0, self.num_local - 1)
        y = self.experts(x, local, scores)          # this rank's experts' sum [N, D]
        part = moe_output(y, self.shared_expert(x), shared_gate, mx.array(0, y.dtype))
        TRAFFIC.all_sum(part.nbytes, self.group.size())
        out = mx.distributed.all_sum(part, group=self.group)                 # [N, D]
        if residual is not None:
            out = out + residual.reshape(-1, shape[-1])
        return out.reshape(shape)
