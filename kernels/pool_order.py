"""Pools written in place by kernels: ordered after their writes once a forward, not once a launch.

A kernel that writes a pool in place (the K/V pools, the recurrent and conv states)
declares the pool as an input, so MLX knows nothing of the write; the dispatch hands back
``mx.depends(pool, out)``: the same buffer, which MLX schedules after the launch, so
whoever reads the returned pool (the next step, a snapshot) reads it written. That is one
Depends node a launch: ~70 in a Qwen3.5 decode step, each walked and encoded by MLX's
host every step, and at B=1 on a GPU the host bounds the step (docs/PERFORMANCE.md).

Inside `once()`, `after_write` hands back the pools themselves and records them; the
forward then calls `settle` with its last array (the final hidden state: every launch of
the forward is an ancestor of it) and puts ONE Depends node's outputs in the cache. The
forward's own readers of a pool it wrote are unaffected: a Depends never orders GPU work
(MLX orders it by declared outputs only: kernels/README.md, "Ordering on a GPU"); the
one such reader in a decode step, the paged attention, takes the prep kernel's q.

Only the engine thread touches mx; two engines run two threads, so the recorder is
per thread.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import mlx.core as mx

_active = threading.local()


class PoolOrder:
    """The pools one forward's launches wrote in place, to order after its last array."""

    def __init__(self):
        self.pools: list[mx.array] = []

    def settle(self, groups: list[list[mx.array]], after: mx.array) -> None:
        """Replace each recorded pool, wherever it sits in `groups` (the cache's lists of
        arrays, changed in place), by its output of one Depends on `after`."""
        if not self.pools:
            return
        unique = list({id(p): p for p in self.pools}.values())
        ordered = dict(zip((id(p) for p in unique), mx.depends(unique, [after])))
        found = 0
        for group in groups:
            for i, a in enumerate(group):
                if id(a) in ordered:
                    group[i] = ordered[id(a)]
                    found += 1
        if found != len(unique):
            raise RuntimeError(f"{len(unique) - found} pool(s) written in place are not in "
                               "the cache: nothing would order a reader after the write")
        self.pools.clear()


@contextmanager
def once(deferred: bool = True):
    """A forward whose in-place writes are ordered once, by its `settle` (deferred), or
    each by its own Depends as outside (not deferred: the order's settle does nothing)."""
    order = PoolOrder()
    before = getattr(_active, "order", None)
    _active.order = order if deferred else None
    try:
        yield order
    finally:
        _active.order = before


def after_write(pools: list[mx.array], outs: list[mx.array]) -> list[mx.array]:
    """`pools` as a launch with outputs `outs` leaves them for its readers: each ordered
    after the launch (one Depends), or inside `once()` the pools themselves, recorded for
    the forward's settle."""
    order = getattr(_active, "order", None)
    if order is None:
        return mx.depends(pools, outs)
    order.pools.extend(pools)
    return list(pools)
