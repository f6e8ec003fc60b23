"""The one owner of KV and state memory: pages, recurrent-state slots and the
finished turns kept in them. Pure Python bookkeeping, no mlx.

The scheduler asks it, with nano-vllm's verbs:
- ``can_allocate(seq)`` / ``allocate(seq)``: room for a waiting prompt (its pages,
  a state slot, or a kept turn it continues) and taking it;
- ``can_append(seq)`` / ``append(seq)``: a page for the token a decode writes;
- ``free(seq, keep)``: give a sequence's memory back, or keep it as a finished turn;
- ``snapshot(seq, n)``: keep a prompt's end (a turn boundary) while the turn goes on.

Eviction of kept turns (least recently used first) happens in ``evict_lru`` only,
called by ``can_allocate``/``can_append``/``snapshot`` when memory is short and
when more turns are kept than allowed. The device-side copies these decisions
need are queued here and handed out by ``take_copies``: a page shared with a
kept turn that its new owner writes into (copy on write), and the state slot a
snapshot keeps (recurrent states cannot rewind). The scheduler puts them in the
step plan; the runner performs them before the step's forward.

With a disk cache (disk_cache.py), a prompt that continues a turn kept on disk longer
than any kept in memory gets fresh pages and a slot here, and the arrays read back
go into them by a DiskLoad in the plan's copies; a turn kept in memory is also
written to disk by a DiskSave there (the runner gathers its pages and state before
the plan's other copies, loads and forward can overwrite them; the step loop hands
numpy copies to the disk cache's writer). Pages never change hands outside this class.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine.cache.disk_cache import DiskCache, DiskPayload
from engine.cache.page_pool import PagePool, SlotPool
from engine.cache.prefix_cache import CacheEntry, PrefixCache
from engine.core.sequence import Sequence


@dataclass(frozen=True)
class DiskLoad:
    """Arrays read from disk, to write into a new owner's pages and slot."""
    pages: list[int]             # covering payload.num_tokens tokens
    slot: int | None
    payload: DiskPayload


@dataclass(frozen=True)
class DiskSave:
    """A kept turn to write to disk: its ids, the pages holding their K/V, its slot."""
    ids: tuple[int, ...]
    pages: list[int]
    slot: int | None


@dataclass
class DeviceCopies:
    """Copies the runner performs before a forward, in this order."""
    pages: list[tuple[int, int]] = field(default_factory=list)    # (src, dst) KV pages
    states: list[tuple[int, int]] = field(default_factory=list)   # (src, dst) state slots
    loads: list[DiskLoad] = field(default_factory=list)           # disk -> pool
    saves: list[DiskSave] = field(default_factory=list)           # pool -> disk

    def __bool__(self) -> bool:
        return bool(self.pages or self.states or self.loads or self.saves)


class CacheManager:
    def __init__(self, num_pages: int, page_size: int, num_slots: int,
                 keep_turns: int | None, exact_prefix_only: bool,
                 disk: DiskCache | None = None):
        """keep_turns: finished turns kept for their conversation's next turn (None: none).
        disk: where kept turns are also written and looked up (needs keep_turns)."""
        self.pages = PagePool(num_pages, page_size)
        self.slots = SlotPool(num_slots)
        self.prefix = (PrefixCache(exact_prefix_only, keep_turns)
                       if keep_turns is not None else None)
        self._holders: dict[int, Sequence] = {}      # request id -> sequence holding memory
        self._matches: dict[int, tuple] = {}         # request id -> ((version, tokens), match)
        self._page_copies: list[tuple[int, int]] = []
        # Snapshots are taken after the plan that reads a prompt's last chunk took its
        # copies: the state exists only after that forward, so they go into the next plan.
        self._state_copies: list[tuple[int, int]] = []
        self.disk = disk if self.prefix is not None else None
        self._loads: list[DiskLoad] = []
        self._saves: list[DiskSave] = []

    # -- sizes ------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self.pages.page_size

    @property
    def num_cached_pages(self) -> int:
        return self.prefix.num_pages if self.prefix else 0

    # -- admission ----------------------------------------------------------------
    def match(self, seq: Sequence) -> tuple[CacheEntry | DiskPayload | None, int]:
        """(kept turn in memory or read from disk, tokens it covers) for seq's prompt,
        or (None, 0).

        Matching walks the prompt's ids; a waiting prompt is asked about every step, so
        the answer (a disk entry's arrays included) is kept until the kept turns or the
        prompt change.
        """
        if self.prefix is None:
            return None, 0
        key = (self.prefix.version, seq.num_tokens)
        known = self._matches.get(seq.request_id)
        if known is None or known[0] != key:
            known = (key, self._match(seq.all_ids))
            self._matches[seq.request_id] = known
        return known[1]

    def _match(self, ids: list[int]) -> tuple[CacheEntry | DiskPayload | None, int]:
        """The longer of the memory and the disk match; a disk file that fails its
        checks is deleted and misses."""
        entry, n = self.prefix.match(ids)
        if self.disk is not None:
            found, n_disk = self.disk.match(ids, self.prefix.exact_prefix_only)
            if found is not None and n_disk > n:
                payload = self.disk.load(found, n_disk)
                if payload is not None:
                    return payload, n_disk
        return entry, n

    def can_allocate(self, seq: Sequence) -> bool:
        """Room for seq's whole prompt plus one token, evicting kept turns if needed."""
        entry, reuse = self.match(seq)
        kept = isinstance(entry, CacheEntry)
        need = self.pages.pages_for(seq.num_tokens + 1)
        if kept:
            need -= self.pages.pages_for(reuse)
            if reuse % self.page_size:
                need += 1   # a shared page the new owner writes into is copied first
        while not (self.pages.can_allocate(need) and (kept or self.slots.num_free)):
            if not self.evict_lru(keep=entry):
                return False
        return True

    def allocate(self, seq: Sequence) -> int:
        """Give seq its pages and slot (call after can_allocate); returns the prompt
        tokens whose K/V and state came from a kept turn."""
        entry, reuse = self.match(seq)
        self._matches.pop(seq.request_id, None)
        if isinstance(entry, CacheEntry):
            pages, slot = self._take(entry, reuse)
        else:
            pages, slot = [], self.slots.allocate()
            reuse = entry.num_tokens if entry is not None else 0
        pages += self.pages.allocate(self.pages.pages_for(seq.num_tokens + 1) - len(pages))
        if isinstance(entry, DiskPayload):
            self._loads.append(DiskLoad(pages[:self.pages.pages_for(reuse)], slot, entry))
        seq.pages, seq.slot = pages, slot
        self._holders[seq.request_id] = seq
        return reuse

    def _take(self, entry: CacheEntry, reuse: int) -> tuple[list[int], int | None]:
        """Take a kept turn over: its pages covering `reuse` tokens and its slot.

        The new owner writes from position `reuse` on, inside the last kept page when
        `reuse` is not page-aligned: if another owner still holds that page (a snapshot
        shares its pages with the running turn), it gets a private copy (copy on write).
        """
        self.prefix.remove(entry)
        keep = self.pages.pages_for(reuse)
        self.pages.free(entry.pages[keep:])
        pages = entry.pages[:keep]
        if reuse % self.page_size and self.pages.refcount(pages[-1]) > 1:
            new = self.pages.allocate(1)[0]
            self._page_copies.append((pages[-1], new))
            self.pages.free([pages[-1]])
            pages = pages[:-1] + [new]
        return pages, entry.slot

    # -- decode ---------------------------------------------------------------------
    def _append_need(self, seq: Sequence) -> int:
        return self.pages.pages_for(seq.num_tokens) - len(seq.pages)

    def can_append(self, seq: Sequence) -> bool:
        """A page for the token seq is about to write, evicting kept turns if needed."""
        while not self.pages.can_allocate(self._append_need(seq)):
            if not self.evict_lru():
                return False
        return True

    def append(self, seq: Sequence) -> None:
        need = self._append_need(seq)
        if need > 0:
            seq.pages.extend(self.pages.allocate(need))

    # -- release, keep, snapshot ------------------------------------------------------
    def forget(self, seq: Sequence) -> None:
        """seq left while waiting: drop what was remembered about it."""
        self._matches.pop(seq.request_id, None)

    def free(self, seq: Sequence, keep: bool = False) -> None:
        """Give back seq's pages and slot, or keep them (its computed ids) as a finished turn."""
        self.forget(seq)
        self._holders.pop(seq.request_id, None)
        if keep and self.prefix is not None:
            self._put(seq.all_ids[:seq.num_computed], seq.pages, seq.slot)
        else:
            self.pages.free(seq.pages)
            if seq.slot is not None:
                self.slots.free(seq.slot)
        seq.pages, seq.slot = [], None

    def snapshot(self, seq: Sequence, num_tokens: int) -> None:
        """Keep seq's first num_tokens (its prompt: a turn boundary) as a finished turn
        while seq goes on, for models whose state cannot rewind.

        Chat templates often re-render the previous answer differently (Qwen3 drops its
        reasoning), so the next turn's prompt starts with this turn's prompt, not with
        everything this turn generated. The pages are shared; the state is copied into
        a spare slot by the copies the next take_copies hands out, so call this after
        the plan whose forward reads the prompt's end has taken its copies.
        """
        if self.prefix is None or not self.prefix.exact_prefix_only:
            return
        if self.slots.num_free == 0 and not self.evict_lru():
            return
        slot = self.slots.allocate()
        pages = seq.pages[:self.pages.pages_for(num_tokens)]
        self.pages.share(pages)
        self._put(seq.all_ids[:num_tokens], pages, slot)
        self._state_copies.append((seq.slot, slot))

    def _put(self, ids: list[int], pages: list[int], slot: int | None) -> None:
        self.prefix.put(ids, pages, slot)
        if self.disk is not None and self.disk.writing and not self.disk.has(tuple(ids)):
            # Gathered by the next plan, before any forward that could overwrite it.
            self._saves.append(DiskSave(tuple(ids), list(pages), slot))
        while self.prefix.is_over_capacity:
            self.evict_lru()

    def take_copies(self) -> DeviceCopies:
        """The copies due before the next forward: copy-on-write pages of this plan's
        admissions, and the states of snapshots taken since the last call (by the
        previous plan: the scheduler snapshots after taking a plan's copies)."""
        copies = DeviceCopies(self._page_copies, self._state_copies, self._loads, self._saves)
        self._page_copies, self._state_copies, self._loads, self._saves = [], [], [], []
        return copies

    @property
    def has_pending_saves(self) -> bool:
        """Kept turns waiting to be gathered for the disk (the engine steps once more)."""
        return bool(self._saves)

    # -- eviction: the one place ------------------------------------------------------
    def evict_lru(self, keep: CacheEntry | None = None) -> bool:
        """Free the least recently used kept turn (never `keep`); False if none is left."""
        victim = self.prefix.least_recently_used(keep) if self.prefix else None
        if victim is None:
            return False
        self.prefix.remove(victim)
        self.pages.free(victim.pages)
        if victim.slot is not None:
            self.slots.free(victim.slot)
        return True

    def drop_kept(self, slots: set[int]) -> None:
        """Drop the kept turns whose state is in `slots` (snapshots whose state copy will
        never come: engine/core/chunk_pieces.py), freeing their pages and slots."""
        for entry in [e for e in (self.prefix.entries if self.prefix else [])
                      if e.slot in slots]:
            self.prefix.remove(entry)
            self.pages.free(entry.pages)
            self.slots.free(entry.slot)

    def clear(self) -> None:
        """Drop every kept turn."""
        while self.evict_lru():
            pass

    # -- invariants -------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Every page's refcount equals its holders, free lists hold exactly the rest,
        and no slot has two owners. Raises AssertionError (tests call it)."""
        entries = self.prefix.entries if self.prefix else []
        owners = list(self._holders.values())
        held = Counter(p for o in owners + entries for p in o.pages)
        assert 0 not in held, "the scratch page was handed out"
        free = set(self.pages.free_ids)
        assert len(free) == len(self.pages.free_ids), "a page is free twice"
        for p in range(1, self.pages.num_pages):
            assert self.pages.refcount(p) == held[p], f"page {p}: refcount != holders"
            assert (p in free) == (held[p] == 0), f"page {p}: free list disagrees"
        slots = [o.slot for o in owners + entries if o.slot is not None]
        assert len(slots) == len(set(slots)), "a state slot has two owners"
        assert not set(slots) & set(self.slots.free_ids), "a held state slot is free"
        assert len(slots) + self.slots.num_free == self.slots.num_slots, "a state slot leaked"
