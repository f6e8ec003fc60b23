"""Who runs in the next step: pure Python (no mlx), testable with a fake runner.

Each step decodes every running sequence that has finished its prompt in ONE
forward [B, 1], then reads at most one chunk of one prompt (decode first, so
streaming conversations keep streaming while a new prompt is read). A
sequence is admitted only when the pool holds pages for its whole prompt;
when decoding needs a page the pool lacks, cached turns are evicted first,
then the latest admitted sequence is preempted: its pages and slot are
freed and it waits to be recomputed. A prompt that continues a cached turn
reads only its new tokens (prefix_cache.py).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.cache.page_pool import PagePool, SlotPool
from engine.cache.prefix_cache import PrefixCache
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
    decode: list[Sequence] = field(default_factory=list)
    # Prompt chunks read together in one ragged forward [len(prefills), T].
    prefills: list[PrefillChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def prefill(self) -> PrefillChunk | None:
        return self.prefills[0] if self.prefills else None

    @property
    def prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.prefills)

    @property
    def is_empty(self) -> bool:
        return not self.decode and not self.prefills


class Scheduler:
    def __init__(self, config: EngineConfig, pool: PagePool, slots: SlotPool,
                 on_pressure=None, cache: PrefixCache | None = None):
        self.config = config
        self.cache = cache      # finished turns kept for the conversation's next turn
        self.page_copies: list[tuple[int, int]] = []   # (src, dst) to copy before the step
        self._matches: dict[int, tuple] = {}   # request id -> ((cache version, tokens), match)
        # Called before preempting: the runner reads back tokens still in flight, so a
        # preempted sequence is recomputed from exact ids (it may also finish some).
        self.on_pressure = on_pressure or (lambda: None)
        self.pool = pool
        self.slots = slots
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []   # in admission order

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self, prefill_budget: int | None = None) -> StepPlan:
        """prefill_budget: padded prompt tokens this step may read (default: one chunk)."""
        plan = StepPlan()
        plan.decode = self._schedule_decode(plan.preempted)
        plan.prefills = self._schedule_prefill(prefill_budget or self.config.prefill_chunk)
        return plan

    # -- decode -------------------------------------------------------------
    def _schedule_decode(self, preempted: list[Sequence]) -> list[Sequence]:
        decode = []
        for seq in list(self.running):
            if seq.status is not Status.RUNNING or seq.is_prefilling:
                continue
            while not self._append_slot(seq) and self.cache and self.cache.evict_lru():
                pass
            if not self._append_slot(seq):
                self.on_pressure()
            while seq.status is Status.RUNNING and not self._append_slot(seq):
                victim = self._latest_running()
                self.preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                decode.append(seq)
        return [s for s in decode if s.status is Status.RUNNING]

    def _append_slot(self, seq: Sequence) -> bool:
        """Make sure seq has a page for the token it is about to write."""
        need = self.pool.pages_for(seq.num_tokens) - len(seq.pages)
        if need <= 0:
            return True
        if not self.pool.can_allocate(need):
            return False
        seq.pages.extend(self.pool.allocate(need))
        return True

    def _latest_running(self) -> Sequence:
        return self.running[-1]

    # -- prefill ------------------------------------------------------------
    def _schedule_prefill(self, budget: int) -> list[PrefillChunk]:
        """Chunks of one or more prompts whose padded forward [rows, T] fits the budget.

        Prompts already being read go first, then waiting ones in order; several short
        prompts (a broadcast to every pane) are read in one forward, the weights once.
        """
        chunks: list[PrefillChunk] = []
        for seq in self._prefill_candidates():
            width = max((c.num_tokens for c in chunks), default=0)
            todo = (seq.num_tokens - self._reusable(seq)[1] if seq.status is Status.WAITING
                    else seq.num_to_prefill)
            n = min(todo, budget)
            if chunks and (len(chunks) + 1) * max(width, n) > budget:
                n = min(todo, width)      # fill the forward's width rather than widen it
                if (len(chunks) + 1) * width > budget:
                    break
            if seq.status is Status.WAITING:
                if not self._can_admit(seq):
                    break
                self.waiting.remove(seq)
                self._admit(seq)
            chunks.append(PrefillChunk(seq, seq.num_computed, n))
        return chunks

    def _prefill_candidates(self):
        yield from [s for s in self.running if s.is_prefilling]
        yield from list(self.waiting)

    def _reusable(self, seq: Sequence):
        """(cache entry, tokens it covers) for seq's prompt, or (None, 0).

        Matching walks the prompt's ids in Python; a waiting prompt is asked about every
        step, so the answer is kept until the cache or the prompt changes.
        """
        if self.cache is None:
            return None, 0
        key = (self.cache.version, seq.num_tokens)
        known = self._matches.get(seq.request_id)
        if known is None or known[0] != key:
            known = (key, self.cache.match(seq.all_ids))
            self._matches[seq.request_id] = known
        return known[1]

    def _can_admit(self, seq: Sequence) -> bool:
        """Room for seq, evicting cached turns (least recently used) when needed."""
        if len(self.running) >= self.config.max_num_seqs:
            return False
        entry, reuse = self._reusable(seq)
        need = self.pool.pages_for(seq.num_tokens + 1) - self.pool.pages_for(reuse)
        if entry is not None and reuse % self.pool.page_size:
            need += 1   # a shared page the new owner writes into is copied first
        while not (self.pool.can_allocate(need) and (entry or self.slots.num_free)):
            if not (self.cache and self.cache.evict_lru(keep=entry)):
                return False
        return True

    def _admit(self, seq: Sequence) -> None:
        entry, reuse = self._reusable(seq)
        self._matches.pop(seq.request_id, None)
        if entry is not None:
            seq.pages, seq.slot, copy = self.cache.take(entry, reuse)
            if copy is not None:
                self.page_copies.append(copy)
        else:
            seq.pages, seq.slot, reuse = [], self.slots.allocate(), 0
        seq.pages += self.pool.allocate(self.pool.pages_for(seq.num_tokens + 1) - len(seq.pages))
        seq.status = Status.RUNNING
        seq.num_computed = reuse
        seq.num_cached = reuse
        seq.prefill_target = seq.num_tokens
        self.running.append(seq)

    def snapshot(self, seq: Sequence) -> int | None:
        """Keep seq's state at the end of its prompt (a turn boundary) as a cache entry;
        return the spare slot to copy the state into, or None.

        Recurrent states cannot rewind, and chat templates often re-render the previous
        answer differently (Qwen3 drops its reasoning), so the next turn's prompt starts
        with this turn's prompt, not with everything this turn generated.
        """
        if self.cache is None or not self.cache.exact_prefix_only:
            return None
        if self.slots.num_free == 0 and not self.cache.evict_lru():
            return None
        slot = self.slots.allocate()
        pages = seq.pages[:self.pool.pages_for(seq.num_computed)]
        self.pool.share(pages)
        self.cache.put(seq.all_ids[:seq.num_computed], pages, slot)
        return slot

    def take_page_copies(self) -> list[tuple[int, int]]:
        copies, self.page_copies = self.page_copies, []
        return copies

    # -- lifecycle ----------------------------------------------------------
    def preempt(self, seq: Sequence) -> None:
        """Free seq's pages and slot; it waits at the front to be recomputed."""
        self._release(seq)
        assert not seq.pending, "resolve in-flight tokens before preempting"
        seq.status = Status.WAITING
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        self._matches.pop(seq.request_id, None)
        if seq.status is Status.WAITING:
            self.waiting.remove(seq)
        elif seq.status is Status.RUNNING and self._keep(seq, reason):
            self.cache.put(seq.all_ids[:seq.num_computed], seq.pages, seq.slot)
            seq.pages, seq.slot = [], None
            self.running.remove(seq)
        elif seq.status is Status.RUNNING:
            self._release(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason

    def _keep(self, seq: Sequence, reason: str) -> bool:
        """A turn that ended normally is kept for the conversation's next turn."""
        return (self.cache is not None and reason in ("stop", "length", "cancelled")
                and seq.num_computed > 0 and not seq.is_prefilling and not seq.pending)

    def _release(self, seq: Sequence) -> None:
        self.pool.free(seq.pages)
        seq.pages = []
        if seq.slot is not None:
            self.slots.free(seq.slot)
            seq.slot = None
        if seq in self.running:
            self.running.remove(seq)
