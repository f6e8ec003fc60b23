"""Who runs in the next step: pure Python (no mlx), testable with a fake runner.

Each step decodes every running sequence that has finished its prompt in ONE
forward [B, 1], then reads at most one chunk of one prompt (decode first, so
streaming conversations keep streaming while a new prompt is read). Memory is
the cache manager's (engine/cache/cache_manager.py): a sequence is admitted
only when it can allocate pages for its whole prompt; when decoding needs a
page it cannot append, the manager evicts kept turns first, then the latest
admitted sequence is preempted: its pages and slot are freed and it waits to
be recomputed. A prompt that continues a kept turn reads only its new tokens.

Prompts are read in order of arrival, but one prompt leads prompt reading for at
most config.prefill_turn_chunks consecutive steps while another waits: then the
prompt read least recently (one never read first; arrival order among equals) leads
for one step, so a new conversation's first chunk never waits behind a long prompt
for more than that many steps. How many tokens a step reads is the caller's (the
step loop's PrefillBudget measures step costs; planning here is deterministic).

The plan is everything the runner needs for one step, the device-side copies
included (copy-on-write pages, snapshot state slots), so nothing reaches the
runner or the step loop by another way.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.cache.cache_manager import CacheManager, DeviceCopies
from engine.config import EngineConfig
from engine.core.sequence import Sequence, Status


@dataclass(frozen=True)
class PrefillChunk:
    seq: Sequence
    start: int          # first token index of the chunk
    num_tokens: int

    @property
    def is_last(self) -> bool:
        return self.start + self.num_tokens == self.seq.prefill_target


@dataclass
class StepPlan:
    """One step. The runner performs `copies` first, then the forwards.

    resolve_first: nothing was planned because a sequence must be preempted while
    tokens sampled by the step still in flight are unknown on the host (a preempted
    sequence is recomputed from exact ids). The step loop reads that step back and
    asks again; the second plan never asks for it (no token is in flight then).
    """
    decode: list[Sequence] = field(default_factory=list)
    # Prompt chunks read together in one ragged forward [len(prefills), T].
    prefills: list[PrefillChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    # Sequences that need more pages than the whole pool has: no preemption can make
    # room, so the step loop ends them ("length", with a note) instead of waiting.
    exhausted: list[Sequence] = field(default_factory=list)
    copies: DeviceCopies = field(default_factory=DeviceCopies)
    resolve_first: bool = False
    # Set by the step loop: the prompt was read in the budget's degraded mode (the
    # reading-pace floor could not hold beside it; engine/core/prefill_budget.py).
    degraded: bool = False
    # Set by the step loop for a mixed step: the seconds the budget predicted it takes
    # (calm step + the chunk's cost), 0 where nothing was predicted.
    predicted_s: float = 0.0
    # Set by the step loop where decode rows ran: which rule of the budget chose the
    # prompt tokens beside them (Allowance.why; a calm step's too, while a prompt waits).
    chunk_reason: str = ""
    # Set by the step loop where the step runs a layer range of a chunk forward
    # (EngineConfig.chunk_pieces, engine/core/chunk_pieces.py): the layers, and the
    # prompt tokens the step counts as reading (its share of the chunk's).
    span: tuple[int, int] | None = None
    span_tokens: int = 0

    @property
    def prefill_tokens(self) -> int:
        if self.span is not None:
            return self.span_tokens
        return sum(c.num_tokens for c in self.prefills)

    @property
    def is_empty(self) -> bool:
        return not self.decode and not self.prefills


class _ResolveFirst(Exception):
    """Planning needs the in-flight step's tokens on the host (see StepPlan)."""


class Scheduler:
    def __init__(self, config: EngineConfig, cache: CacheManager):
        self.config = config
        self.cache = cache
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []   # in admission order
        # Fairness between prompts: who led the last step's prompt reading, for how many
        # consecutive steps, and the plan number at which each prompt was last read.
        self._lead: Sequence | None = None
        self._lead_steps = 0
        self._last_read: dict[int, int] = {}
        self._num_plans = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self, prefill_budget: int | None = None) -> StepPlan:
        """prefill_budget: padded prompt tokens this step may read (default: one chunk;
        0: none)."""
        plan = StepPlan()
        try:
            plan.decode = self._schedule_decode(plan.preempted, plan.exhausted)
        except _ResolveFirst:
            return StepPlan(resolve_first=True)
        budget = self.config.prefill_chunk if prefill_budget is None else prefill_budget
        # 0: no prompt this step (the budget banks the streams' time for a longer chunk)
        plan.prefills = self._schedule_prefill(budget, plan.exhausted) if budget > 0 else []
        self._note_reading(plan.prefills)
        plan.copies = self.cache.take_copies()
        for c in plan.prefills:
            if c.is_last:       # a turn boundary: keep the state for the next turn
                self.cache.snapshot(c.seq, c.start + c.num_tokens)
        return plan

    def prompt_tokens_left(self) -> int:
        """The fewest tokens any prompt still has to read (0: no prompt is waiting):
        whether one could finish within a step's chunk (engine/core/prefill_budget.py)."""
        left = [s.num_to_prefill for s in self.running if s.is_prefilling]
        left += [s.num_tokens for s in self.waiting]
        return min(left, default=0)

    # -- decode -------------------------------------------------------------
    def _outgrows_pool(self, seq: Sequence, extra: int) -> bool:
        """seq with `extra` more tokens needs more pages than the whole pool holds."""
        return self.cache.pages.pages_for(seq.num_tokens + extra) > self.cache.pages.num_total

    def _schedule_decode(self, preempted: list[Sequence],
                         exhausted: list[Sequence]) -> list[Sequence]:
        decode = []
        for seq in list(self.running):
            if seq.status is not Status.RUNNING or seq.is_prefilling:
                continue
            if self._outgrows_pool(seq, 0):
                if seq.pending:          # its last tokens first, so the reply keeps them
                    raise _ResolveFirst
                exhausted.append(seq)
                continue
            while not self.cache.can_append(seq):
                if any(s.pending for s in self.running):
                    raise _ResolveFirst
                victim = self.running[-1]
                self.preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                self.cache.append(seq)
                decode.append(seq)
        return [s for s in decode if s.status is Status.RUNNING]

    # -- prefill ------------------------------------------------------------
    def _schedule_prefill(self, budget: int,
                          exhausted: list[Sequence]) -> list[PrefillChunk]:
        """Chunks of one or more prompts whose padded forward [rows, T] fits the budget.

        Prompts already being read go first, then waiting ones in order; several short
        prompts (a broadcast to every pane) are read in one forward, the weights once.
        """
        chunks: list[PrefillChunk] = []
        for seq in self._prefill_order():
            if seq.status is Status.WAITING and self._outgrows_pool(seq, 1):
                exhausted.append(seq)    # preempted, then grew past what the pool holds
                continue
            width = max((c.num_tokens for c in chunks), default=0)
            todo = (seq.num_tokens - self.cache.match(seq)[1] if seq.status is Status.WAITING
                    else seq.num_to_prefill)
            n = min(todo, budget)
            if chunks and (len(chunks) + 1) * max(width, n) > budget:
                n = min(todo, width)      # fill the forward's width rather than widen it
                if (len(chunks) + 1) * width > budget:
                    break
            if seq.status is Status.WAITING:
                if not self._can_admit(seq):
                    break
                self._admit(seq)
            chunks.append(PrefillChunk(seq, seq.num_computed, n))
        return chunks

    def _prefill_order(self) -> list[Sequence]:
        """Prompts being read (admission order), then waiting ones (arrival order); when
        the leader has had its turn and another prompt can be read, that one goes first."""
        order = [s for s in self.running if s.is_prefilling] + list(self.waiting)
        if (len(order) < 2 or order[0] is not self._lead
                or self._lead_steps < self.config.prefill_turn_chunks):
            return order
        # Least recently read first (sorted() is stable: arrival order among equals);
        # admission is checked lazily, it may evict kept turns.
        for nxt in sorted(order[1:], key=lambda s: self._last_read.get(s.request_id, -1)):
            if nxt.status is Status.RUNNING or self._can_admit(nxt):
                return [nxt] + [s for s in order if s is not nxt]
        return order

    def _note_reading(self, chunks: list[PrefillChunk]) -> None:
        self._num_plans += 1
        for c in chunks:
            self._last_read[c.seq.request_id] = self._num_plans
        if not chunks:
            return
        lead = chunks[0].seq
        self._lead_steps = self._lead_steps + 1 if lead is self._lead else 1
        self._lead = lead

    def _can_admit(self, seq: Sequence) -> bool:
        return len(self.running) < self.config.max_num_seqs and self.cache.can_allocate(seq)

    def _admit(self, seq: Sequence) -> None:
        self.waiting.remove(seq)
        reuse = self.cache.allocate(seq)
        seq.status = Status.RUNNING
        seq.num_computed = reuse
        seq.num_cached = reuse
        seq.prefill_target = seq.num_tokens
        self.running.append(seq)

    # -- lifecycle ----------------------------------------------------------
    def preempt(self, seq: Sequence) -> None:
        """Free seq's pages and slot; it waits at the front to be recomputed."""
        assert not seq.pending, "resolve in-flight tokens before preempting"
        self.cache.free(seq)
        self.running.remove(seq)
        seq.status = Status.WAITING
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        if seq.status is Status.WAITING:
            self.waiting.remove(seq)
            self.cache.forget(seq)
        elif seq.status is Status.RUNNING:
            self.cache.free(seq, keep=self._keep(seq, reason))
            self.running.remove(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        self._last_read.pop(seq.request_id, None)
        if self._lead is seq:
            self._lead, self._lead_steps = None, 0

    @staticmethod
    def _keep(seq: Sequence, reason: str) -> bool:
        """A turn that ended normally is kept for the conversation's next turn."""
        return (reason in ("stop", "length", "cancelled") and seq.num_computed > 0
                and not seq.is_prefilling and not seq.pending)
