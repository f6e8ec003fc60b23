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

import mlx.core as mx

from engine.arith import ceil_div
from engine.cache.cache_manager import DeviceCopies
from engine.core.sequence import Status
from engine.models.layer_pieces import Carry, layer_bounds
from kernels.backend import gpu_backend

# EngineConfig.chunk_pieces=None on a CUDA GPU: measured there (H200, session 30,
# docs/PERFORMANCE.md); 2 left gaps over twice the floor, 8 was measured beside another
# job on the same GPU only.
AUTO_PIECES = 4


def on_cuda() -> bool:
    """The default device is a CUDA GPU (not Metal, not the CPU)."""
    return gpu_backend() == "cuda"


def pieces_of(config, num_layers: int | None = None, reads_in_pieces: bool = True) -> int:
    """EngineConfig.chunk_pieces, or when None: AUTO_PIECES on a CUDA GPU where a chunk can
    be read so (two forwards of plain chunks, prefill_chunk a multiple, a model of at least
    that many layers, a runner that reads pieces: not the distributed engine), else 1."""
    if config.chunk_pieces is not None:
        return config.chunk_pieces
    fits = (not config.mixed_forward and not config.compile_chunks
            and config.prefill_chunk % AUTO_PIECES == 0 and reads_in_pieces
            and (num_layers is None or num_layers >= AUTO_PIECES))
    return AUTO_PIECES if fits and on_cuda() else 1


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


class ChunkPieces:
    """The step loop's side of it: the chain running (if any), the copies held while it
    runs, and the Carry arrays of the piece just queued (evaluated with its step)."""

    def __init__(self, pieces: int, num_layers: int):
        self.k = pieces
        self.num_layers = num_layers
        self.chain: PieceChain | None = None
        self.held = DeviceCopies()
        self.carried: list[mx.array] = []

    def budget_share(self, tokens: int) -> int:
        """What the budget is asked about for a prompt of `tokens` left (0: none): a
        step's share."""
        return effective(tokens, self.k) if tokens else 0

    def release(self, plan) -> None:
        """A plan after a chain: the copies held while it ran go first."""
        if self.held:
            plan.copies, self.held = merged(self.held, plan.copies), DeviceCopies()

    def begin(self, plan, inputs_of) -> None:
        """A plan with decode rows and prompt chunks starts a chain (K > 1): its first
        step runs the first layer range. inputs_of(chunks): the chunk forward's inputs."""
        if self.k > 1 and plan.decode and plan.prefills:
            self.chain = PieceChain.start(plan.prefills, self.num_layers, self.k,
                                          inputs_of(plan.prefills))
            plan.span = self.chain.span(alone=False)
            plan.span_tokens = effective(self.chain.tokens, len(self.chain.bounds))
            self.chain.degraded = plan.degraded

    def go_on(self, plan, requests, cache):
        """The chain's next step on `plan` (the scheduler's, decode rows only): its next
        layer range, every layer left when no row is decoding. None when a sequence of
        it was preempted, cancelled or finished and no row decodes: the chain is dropped
        and the step is planned afresh (the held copies with it)."""
        chain = self.chain
        if not chain.alive(requests):
            self.drop(cache)
            self.held = merged(self.held, plan.copies)
            if not plan.decode:
                return None
            plan.copies, self.held = self.held, DeviceCopies()
            return plan
        # Held until the last piece is queued: a snapshot taken now would copy a state
        # some of whose layers have not read the chunk yet.
        self.held, plan.copies = merged(self.held, plan.copies), DeviceCopies()
        plan.prefills = chain.chunks
        plan.span = chain.span(alone=not plan.decode)
        runs = sum(1 for b in chain.bounds[chain.next:] if b[1] <= plan.span[1])
        plan.span_tokens = effective(chain.tokens, len(chain.bounds)) * runs
        if plan.decode:
            plan.degraded = chain.degraded
            plan.chunk_reason = f"piece {chain.next + 1}/{len(chain.bounds)}"
        return plan

    def run(self, runner, plan) -> mx.array | None:
        """Queue the chain's layers `plan.span`: the chunks' logits after the last layer
        (the chain ends), else None, its Carry kept for the next step (its arrays in
        `carried`, to evaluate with this step)."""
        chain = self.chain
        out = runner.prefill_piece(chain.chunks, plan.span, chain.carry, chain.inputs)
        chain.ran(plan.span, out)
        if chain.done:
            self.chain, self.carried = None, []
            return out
        self.carried = [a for a in (out.h, out.pending) if a is not None]
        return None

    def drop(self, cache) -> None:
        """The chain ends before its last piece (its sequences preempted, cancelled or
        finished, or a step failed): the turn snapshots its first plan took would copy a
        state half read, so they are dropped with their kept turns."""
        chain, self.chain, self.carried = self.chain, None, []
        if chain is not None:
            self.held, dropped = without_snapshots_of(self.held, chain.slots)
            cache.drop_kept(dropped)
