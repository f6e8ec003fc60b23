"""Rank 0's runner: every forward and every cache copy is broadcast, then run.

The scheduler, the cache manager (pages, slots, kept turns) and sampling live on
rank 0 only; followers receive block tables, slot mappings and state slots, so the
pages of every rank's shard of the pool are the pages rank 0 allocated. Copies
(copy-on-write pages, turn snapshots) are sent as messages, so every rank's pool
holds the same pages; the disk cache's saves and loads move every rank's part of a
turn (disk_parts.py).
"""
from __future__ import annotations

import time

import mlx.core as mx
import numpy as np

from engine.core import pool_scatters
from engine.core.disk_transfer import _device
from engine.core.runner import Runner
from engine.distributed.disk_parts import gather_parts, scatter_load
from engine.distributed.wire import (
    COMPILED,
    COPY_PAGES,
    COPY_STATE,
    GROUPS,
    LOAD,
    PLAIN,
    SAVE,
    START,
    Wire,
)
from engine.models.base import ModelCache


class ClusterError(RuntimeError):
    """A rank stopped or stopped answering: the group cannot run steps any more."""


class LeaderRunner(Runner):
    reads_in_pieces = False     # forwards go to the followers whole (wire.py)

    def __init__(self, model, config, num_pages: int | None, wire: Wire):
        super().__init__(model, config, num_pages)
        self.wire = wire
        # Chunks run as the wire's PLAIN / GROUPS forwards, which every rank replays.
        self.compiled_chunks = None
        self.broken: str | None = None      # why the group can no longer run (ClusterError)
        self.last_sent = time.monotonic()   # the watchdog's clock (cluster.Watchdog)
        self._send([START, self.cache.num_pages, self.cache.num_slots, self.page_size])

    def forward(self, tokens, view, cache: ModelCache | None = None, compiled: bool = False):
        private = cache is not None and cache is not self.cache
        pages, slots = (cache.num_pages, cache.num_slots) if private else (0, 0)
        mode = COMPILED if compiled and self.compiled is not None else PLAIN
        [(tokens, view)] = self._send_forward([(tokens, view)], pages, slots, mode)
        logits, arrays = super().forward(tokens, view, cache, compiled)
        pool_scatters.queue(logits, *arrays)      # what was broadcast always runs (see wire.py)
        return logits, arrays

    def forward_groups(self, groups: list[tuple]) -> list[mx.array]:
        sent = self._send_forward(groups, 0, 0, GROUPS)
        logits = self.model.forward_groups(sent, self.cache)
        pool_scatters.queue(*logits, *self.cache.arrays())
        return logits

    def copy_pages(self, pairs: list[tuple[int, int]]) -> None:
        flat = mx.array(np.array(pairs, np.int32).reshape(-1))
        self._send([COPY_PAGES, flat.size], flat)
        super().copy_pages(pairs)

    def copy_state_slot(self, src: int, dst: int) -> None:
        self._send([COPY_STATE, src, dst])
        super().copy_state_slot(src, dst)

    def copy_state_slots(self, pairs: list[tuple[int, int]]) -> None:
        """One by one: each pair is a message the followers replay (wire.py)."""
        for src, dst in pairs:
            self.copy_state_slot(src, dst)

    def _save(self, save, slot: int | None) -> dict[str, mx.array]:
        self._send([SAVE, -1 if slot is None else slot, len(save.ids), len(save.pages)],
                   mx.array(np.array(save.pages, np.int32)))
        return gather_parts(self.wire, self.cache, save.pages, len(save.ids), slot)

    def _load(self, load) -> None:
        n = load.payload.num_tokens
        self._send([LOAD, -1 if load.slot is None else load.slot, n, len(load.pages)],
                   mx.array(np.array(load.pages, np.int32)))
        dtypes = {name: a.dtype for name, a in _named_arrays(self.cache)}
        tensors = {name: _device(t, dtypes[name]) for name, t in load.payload.tensors.items()}
        scatter_load(self.wire, self.cache, load.pages, n, load.slot, tensors)

    def close(self) -> None:
        """Tell the followers to stop (unless the group is already broken)."""
        if self.broken is None:
            self.wire.close()

    def _send_forward(self, groups, pages: int, slots: int, mode: int):
        self._check()
        self.last_sent = time.monotonic()
        return self.wire.send_forward(groups, pages, slots, mode)

    def _send(self, header: list[int], payload: mx.array | None = None):
        self._check()
        self.last_sent = time.monotonic()
        return self.wire.send(header, payload)

    def _check(self) -> None:
        if self.broken is not None:
            raise ClusterError(self.broken)


def _named_arrays(cache: ModelCache):
    """(disk tensor name, pool array) of every array a saved turn holds."""
    for i, pair in enumerate(cache.kv):
        for j, part in enumerate("kv"):
            yield f"kv.{i}.{part}", pair[j]
    for i, layer in enumerate(cache.states):
        for j, arr in enumerate(layer):
            yield f"state.{i}.{j}", arr
