"""A prompt chunk read beside decode rows a layer range a step (EngineConfig.chunk_pieces).

The prefill budget (engine/core/prefill_budget.py) prices each step; with K pieces a
step runs 1/K of a chunk's layers, so the budget is asked for a step's share of tokens
(`effective`) and the scheduler for K times that: a chunk of n tokens costs each of its
K steps about c + (F + n p) / K, and the budget learns those steps as steps that read
n / K tokens (the same K always, so one length's readings are one kind of step).

While a chain runs, the scheduler plans decode rows only (no other chunk may write the
pool ahead of the chain's later layers), and the copies it hands out are held until the
chain's last piece is queued: a turn's recurrent-state snapshot (Scheduler.schedule ->
CacheManager.snapshot) is taken by the next plan's copies, which would otherwise copy the
state of a chunk half read. The chunk's sequences count as read (num_computed) and its
last token is sampled only with the last piece; a sequence preempted, cancelled or
finished meanwhile ends the chain (its pages and slot are no longer its own).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.arith import ceil_div
from engine.cache.cache_manager import DeviceCopies
from engine.core.sequence import Status
from engine.models.layer_pieces import Carry, layer_bounds


def effective(tokens: int, pieces: int) -> int:
    """The tokens a step of a K-piece chain reads, for the budget (at least 1)."""
    return max(1, ceil_div(tokens, pieces))


@dataclass
class PieceChain:
    """One chunk forward (one or more prompts' chunks, as the scheduler planned them)
    run over len(bounds) steps."""
    chunks: list                    # PrefillChunk
    bounds: list[tuple[int, int]]   # layer ranges, in order
    inputs: tuple                   # (tokens, view) built by the first piece, reused
    pages: list[tuple[int, ...]] = field(default_factory=list)  # each sequence's, at start
    slots: set[int] = field(default_factory=set)                # their state slots
    next: int = 0                   # the piece the next step runs
    degraded: bool = False          # chosen in the budget's degraded mode: so is each step
    carry: Carry | None = None

    @classmethod
    def start(cls, chunks, num_layers: int, pieces: int, inputs: tuple) -> PieceChain:
        """K pieces (at most one a layer: a model of fewer layers runs fewer, longer)."""
        return cls(list(chunks), layer_bounds(num_layers, min(pieces, num_layers)), inputs,
                   [tuple(c.seq.pages) for c in chunks],
                   {c.seq.slot for c in chunks if c.seq.slot is not None})

    @property
    def tokens(self) -> int:
        """Prompt tokens of the whole chunk forward."""
        return sum(c.num_tokens for c in self.chunks)

    def span(self, alone: bool) -> tuple[int, int]:
        """The layers the next step runs: its piece, or with no decode rows beside it
        (nobody to keep streaming) every layer left."""
        start = self.bounds[self.next][0]
        return (start, self.bounds[-1][1]) if alone else self.bounds[self.next]

    def ran(self, span: tuple[int, int], out) -> None:
        """The step queued `span`; out is its Carry (or the chunk's logits: done)."""
        self.next = next(i for i, b in enumerate(self.bounds) if b[1] == span[1]) + 1
        self.carry = out if isinstance(out, Carry) else None

    @property
    def done(self) -> bool:
        return self.next >= len(self.bounds)

    def alive(self, requests) -> bool:
        """Every sequence still running with the pages it started with (not preempted,
        cancelled or finished)."""
        return all(c.seq.request_id in requests and c.seq.status is Status.RUNNING
                   and tuple(c.seq.pages[:len(p)]) == p
                   for c, p in zip(self.chunks, self.pages))


def without_snapshots_of(copies: DeviceCopies, slots: set[int]) -> tuple[DeviceCopies, set[int]]:
    """`copies` less the state copies out of `slots` (snapshots of a chain's sequences)
    and the disk saves of those snapshots -> (what is left, the snapshots' slots)."""
    dropped = {dst for src, dst in copies.states if src in slots}
    return (DeviceCopies(copies.pages, [p for p in copies.states if p[0] not in slots],
                         copies.loads, [s for s in copies.saves if s.slot not in dropped]),
            dropped)


def merged(first: DeviceCopies, then: DeviceCopies) -> DeviceCopies:
    """Both plans' copies, `first`'s before `then`'s (held copies, then a new plan's)."""
    return DeviceCopies(first.pages + then.pages, first.states + then.states,
                        first.loads + then.loads, first.saves + then.saves)
