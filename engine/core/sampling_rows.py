"""A decode batch's sampling settings as the sampling graph takes them (engine/core/sampler.py).

Per-row settings become [B, 1] columns made once per distinct batch
(`engine/core/host_arrays.constant`), so a step makes no array from host values, and
what decides the graph's Python branches is one hashable `GraphShape`: with the input
shapes, what a compiled trace is kept for.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from engine.core.host_arrays import constant
from engine.sampling_params import SamplingParams


def column(values: list, dtype=mx.float32) -> mx.array:
    # The same settings step after step: one array, made once (engine/core/host_arrays.py)
    return constant(tuple(values), dtype)[:, None]                     # [B, 1]


@dataclass(frozen=True)
class GraphShape:
    """What decides the sampling graph's structure (its Python branches): with the input
    shapes, what a compiled trace is kept for."""
    width: int          # top-k's candidates: the largest k, to a power of two (candidates)
    by_mass: bool       # some row's top-p runs over the whole vocabulary (no top-k)
    filters: bool       # some row has top-k, top-p or min-p
    greedy_rows: bool   # some rows are greedy (their argmax beside the draw)


def candidates(top_k: int, num_vocab: int) -> int:
    """The top-k candidates a graph takes for a batch whose largest k is top_k: the next
    power of two (at most the vocabulary), 0 without top-k. Each row still keeps its own
    k (sampling_keep._top_k_keep masks rank >= k), so a wider graph keeps the same ids;
    what it saves is a graph a k value: each is traced apart, and on a GPU its fused
    kernels compile there (an API client's top_k=40 and another's 50 are one graph)."""
    if top_k <= 0:
        return 0
    return min(1 << (top_k - 1).bit_length(), num_vocab)


@dataclass(frozen=True)
class RowSettings:
    """A batch's sampling settings as the graph takes them: its shape and per-row
    columns ([B, 1]; is_greedy [B]), made once per distinct batch (host_arrays.constant)."""
    shape: GraphShape
    arrays: dict

    @staticmethod
    def of(params: Sequence[SamplingParams], num_vocab: int) -> RowSettings:
        top_k = [p.top_k if 0 < p.top_k < num_vocab else 0 for p in params]
        by_rank = [k > 0 for k in top_k]                # top-k (and its top-p) by candidates
        by_mass = [k == 0 and p.top_p < 1.0 for k, p in zip(top_k, params)]  # by bisection
        shape = GraphShape(width=candidates(max(top_k, default=0), num_vocab),
                           by_mass=any(by_mass),
                       filters=any(p.top_k > 0 or p.top_p < 1.0 or p.min_p > 0.0
                                   for p in params),
                       greedy_rows=any(p.greedy for p in params))
        # Greedy rows get temperature 1 here; their result is replaced by argmax anyway.
        arrays = {"temps": column([p.temperature if not p.greedy else 1.0 for p in params]),
                  "min_p": column([p.min_p for p in params])}
        if shape.greedy_rows:
            arrays["is_greedy"] = constant(tuple(p.greedy for p in params), mx.bool_)
        if shape.width:
            arrays.update(by_rank=column(by_rank, mx.bool_),
                          k=column([max(k, 1) for k in top_k], mx.int32),
                          rank_top_p=column([p.top_p for p in params]),
                          top_p_off=column([p.top_p >= 1.0 for p in params], mx.bool_))
        if shape.by_mass:
            arrays.update(by_mass=column(by_mass, mx.bool_),
                          mass_top_p=column([p.top_p if m else 0.5
                                              for p, m in zip(params, by_mass)]))
        return RowSettings(shape, arrays)
