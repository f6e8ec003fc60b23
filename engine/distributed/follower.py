"""Ranks 1..N-1: receive rank 0's messages and run them, until the shutdown message.

A follower owns no scheduler and no page allocator: its pool is rank 0's layout with
its own heads, and every page and slot it writes comes in the message. It runs the
same Runner as rank 0 (the same padding, compiled forwards and copies), so both
sides issue the same collectives in the same order.
"""
from __future__ import annotations

import dataclasses
import sys

import mlx.core as mx
import numpy as np

from engine.config import EngineConfig
from engine.core import pool_scatters
from engine.core.compile_release import release_thread_compiled
from engine.core.runner import Runner
from engine.distributed.disk_parts import gather_parts, scatter_load
from engine.distributed.wire import (
    COMPILED,
    COPY_PAGES,
    COPY_STATE,
    FORWARD,
    GROUPS,
    LOAD,
    SAVE,
    SHUTDOWN,
    START,
    Wire,
    WireError,
)
from engine.models.base import ModelCache


class Follower:
    def __init__(self, model, config: EngineConfig, group):
        self.model, self.config = model, config
        self.wire = Wire(group)
        self.runner: Runner | None = None
        self.num_messages = 0

    def run(self) -> None:
        """Until SHUTDOWN. A lost rank 0 raises the backend's error (RuntimeError)."""
        while True:
            header = self.wire.receive_header()
            self.num_messages += 1
            if header[0] == SHUTDOWN:
                return
            self.apply(header)

    def apply(self, header: list[int]) -> None:
        kind = header[0]
        if kind == START:
            self._start(*header[1:4])
        elif self.runner is None:
            raise WireError(f"message {kind} before the start message")
        elif kind == FORWARD:
            self._forward(header)
        elif kind == COPY_PAGES:
            pairs = np.array(self.wire.receive_payload(header[1]).tolist()).reshape(-1, 2)
            self.runner.copy_pages([tuple(p) for p in pairs.tolist()])
        elif kind == COPY_STATE:
            self.runner.copy_state_slot(header[1], header[2])
        elif kind in (SAVE, LOAD):
            self._disk(kind, *header[1:4])
        else:
            raise WireError(f"unknown message kind {kind}")

    def _disk(self, kind: int, slot: int, num_tokens: int, num_pages: int) -> None:
        """A kept turn to disk (this rank's part, gathered to rank 0) or from it (this
        rank's part of what rank 0 read). Evaluated now: its collectives come before
        the next message's."""
        pages = self.wire.receive_payload(num_pages).tolist()
        slot = None if slot < 0 else slot
        cache = self.runner.cache
        if kind == SAVE:
            mx.async_eval(list(gather_parts(self.wire, cache, pages, num_tokens,
                                            slot).values()))       # reads only
        else:
            scatter_load(self.wire, cache, pages, num_tokens, slot, None)
            pool_scatters.queue(self.runner.cache_arrays())

    def _start(self, num_pages: int, num_slots: int, page_size: int) -> None:
        config = dataclasses.replace(self.config, num_pages=num_pages)
        self.runner = Runner(self.model, config, num_pages)
        mine = (self.runner.cache.num_slots, self.runner.page_size)
        if mine != (num_slots, page_size):
            raise WireError(f"rank 0 runs {num_slots} state slots of pages of {page_size}; "
                            f"this rank {mine}: start every rank with the same options")
        mx.eval(self.runner.cache_arrays())

    def _forward(self, header: list[int]) -> None:
        msg = self.wire.receive_forward(header)
        runner = self.runner
        if msg.mode == GROUPS:
            logits = runner.model.forward_groups(msg.groups, runner.cache)
            pool_scatters.queue(*logits, *runner.cache_arrays())
            return
        [(tokens, view)] = msg.groups
        cache = None
        if msg.cache_pages:
            cache = ModelCache(self.model.cache_spec(), msg.cache_pages, view.page_size,
                               msg.cache_slots)
        logits, arrays = runner.forward(tokens, view, cache, compiled=msg.mode == COMPILED)
        pool_scatters.queue(logits, *arrays)


def follow(model, config: EngineConfig, group) -> int:
    """The follower's whole life; the exit status for its process."""
    follower = Follower(model, config, group)
    try:
        follower.run()
    except RuntimeError as e:
        print(f"rank {group.rank()}: lost the group ({e}); stopping.", file=sys.stderr)
        return 3
    finally:
        # Its compiled forwards' traces go while the interpreter lives (compile_release.py).
        release_thread_compiled(follower.runner)
    return 0
