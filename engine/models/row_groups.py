"""One forward over several groups of rows: a step's decode rows and its prompt chunks.

A step that has decode rows ([Bd, 1] tokens) and prompt chunks ([Bp, T]) runs them as
ONE forward (a "mixed forward", docs/ENGINE.md): every token-wise part of a layer
(norms, residuals, the MLP or MoE block, the mixers' input and output projections)
runs once on all groups' tokens flattened and concatenated, [N = sum B_g*T_g, H], so
each weight is read once for both; the sequence mixers (attention, Gated DeltaNet) run
per group with that group's BatchView, reading and writing the same ModelCache (the
groups own different pages and slots). A plain forward is the same code with one
group, where every split and join is a reshape.

Models build a RowGroups once per forward and hand it to every layer.
"""
from __future__ import annotations

from functools import cached_property
from itertools import accumulate

import mlx.core as mx
import numpy as np

from engine.core.batch_view import BatchView
from engine.models.shapes import reshaped


class RowGroups:
    """The groups of one forward; layers split the joined [N, ...] tokens per group and
    join the per-group [B_g, T_g, ...] results back."""

    def __init__(self, views: list[BatchView]):
        if not views:
            raise ValueError("a forward needs at least one group of rows")
        self.views = views
        self.sizes = [v.batch_size * v.num_tokens for v in views]     # tokens per group
        self.starts = [0, *accumulate(self.sizes)][:-1]                 # first joined token

    @property
    def num_tokens(self) -> int:
        return sum(self.sizes)

    @property
    def single_decode(self) -> bool:
        """One group of one token a row: a decode step alone, where the kernels' in-place
        pool writes are ordered once for the forward (kernels/pool_order.py); a forward
        of several groups keeps one order a launch (two groups' launches may share a pool)."""
        return len(self.views) == 1 and self.views[0].num_tokens == 1

    def join_tokens(self, tokens: list[mx.array]) -> mx.array:
        """Per group [B_g, T_g] ids -> [N]."""
        if len(tokens) == 1:
            return reshaped(tokens[0], -1)
        return mx.concatenate([reshaped(t, -1) for t in tokens])

    def split(self, x: mx.array) -> list[mx.array]:
        """[N, *F] -> per group [B_g, T_g, *F]."""
        rest = x.shape[1:]
        return [reshaped(x if len(self.views) == 1 else x[s:s + n],
                         v.batch_size, v.num_tokens, *rest)
                for v, s, n in zip(self.views, self.starts, self.sizes)]

    def join(self, parts: list[mx.array]) -> mx.array:
        """Per group [B_g, T_g, *F] -> [N, *F]."""
        flat = [reshaped(p, -1, *p.shape[2:]) for p in parts]
        return flat[0] if len(flat) == 1 else mx.concatenate(flat, axis=0)

    @cached_property
    def route_rows(self) -> mx.array | None:
        """[N] int32: the joined token whose routed experts each token uses (padding
        decode rows: their group's row 0, BatchView.route_rows), once per forward;
        None when no group has padding rows."""
        if all(v.route_rows is None for v in self.views):
            return None
        if len(self.views) == 1:
            return self.views[0].route_rows
        parts = [(mx.arange(n, dtype=mx.int32) if v.route_rows is None else v.route_rows) + s
                 for v, s, n in zip(self.views, self.starts, self.sizes)]
        return mx.concatenate(parts)

    def _wants_all(self, v: BatchView) -> bool:
        return v.all_logits or v.num_tokens == 1

    def select_logit_rows(self, h: mx.array) -> mx.array:
        """[N, H] -> [M, H]: the tokens whose logits are read (every token of an
        all_logits group, else each row's last valid token; nobody reads the rest)."""
        if all(self._wants_all(v) for v in self.views):
            return h
        idx = [mx.arange(s, s + n, dtype=mx.int32) if self._wants_all(v)
               else s + mx.arange(v.batch_size, dtype=mx.int32) * v.num_tokens + v.last_index()
               for v, s, n in zip(self.views, self.starts, self.sizes)]
        return h[idx[0] if len(idx) == 1 else mx.concatenate(idx)]

    def split_logits(self, logits: mx.array) -> list[mx.array]:
        """[M, V] -> per group [B_g, T_g, V] (all_logits) or [B_g, 1, V]."""
        shapes = [(v.batch_size, v.num_tokens if v.all_logits else 1) for v in self.views]
        if len(shapes) == 1:
            return [reshaped(logits, *shapes[0], -1)]
        ends = list(accumulate(int(np.prod(s)) for s in shapes))
        parts = mx.split(logits, ends[:-1], axis=0)
        return [reshaped(p, *s, -1) for p, s in zip(parts, shapes)]
