"""Finished turns keep their KV pages and recurrent state, so the next turn of the
same conversation reads only its new tokens. Pure Python, no mlx.

An entry holds the ids whose K/V (and state) are in the cache, their pages and
the state slot. A new prompt that starts with an entry's ids takes the entry
over (a conversation goes on linearly; a branch simply misses). Attention-only
models can also reuse a shorter common prefix (later pages are dropped and
overwritten); models with a recurrent state cannot rewind it, so they reuse an
entry only when all of its ids are a prefix of the new prompt. Entries are
evicted least recently used first, whenever pages or slots are needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.cache.page_pool import PagePool, SlotPool


@dataclass(eq=False)
class CacheEntry:
    ids: tuple[int, ...]
    pages: list[int]
    slot: int | None
    last_used: int


class PrefixCache:
    def __init__(self, pool: PagePool, slots: SlotPool, exact_prefix_only: bool,
                 max_entries: int):
        self.pool = pool
        self.slots = slots
        self.exact_prefix_only = exact_prefix_only
        self.max_entries = max_entries
        self.entries: list[CacheEntry] = []
        self._clock = 0
        self.version = 0        # changes whenever entries change: matches can be reused

    @property
    def num_pages(self) -> int:
        return sum(len(e.pages) for e in self.entries)

    def put(self, ids: list[int], pages: list[int], slot: int | None) -> None:
        """Keep a finished sequence's computed ids, pages and slot."""
        self._clock += 1
        self.version += 1
        self.entries.append(CacheEntry(tuple(ids), pages, slot, self._clock))
        while len(self.entries) > self.max_entries:
            self.evict_lru()

    def match(self, ids: list[int]) -> tuple[CacheEntry | None, int]:
        """The entry to reuse for a prompt and how many of its tokens it covers.

        At least one prompt token is left to read: its logits give the first token.
        """
        best, best_len = None, 0
        for e in self.entries:
            n = _common_prefix(e.ids, ids, limit=len(ids) - 1)
            if self.exact_prefix_only and n < len(e.ids):
                continue
            if n > best_len:
                best, best_len = e, n
        return best, best_len

    def take(self, entry: CacheEntry, reuse: int):
        """Remove the entry; return (pages covering its first `reuse` tokens, its slot,
        page copy or None). Pages past them go back to the pool.

        The new owner writes from position `reuse` on, inside the last kept page when
        `reuse` is not page-aligned: if another owner still holds that page (a turn
        snapshot shares its pages with the running turn), it gets a private copy
        (copy on write) and the returned (old, new) pair says which page to copy.
        """
        self.entries.remove(entry)
        self.version += 1
        keep = self.pool.pages_for(reuse)
        self.pool.free(entry.pages[keep:])
        pages, copy = entry.pages[:keep], None
        if reuse % self.pool.page_size and self.pool.refcount(pages[-1]) > 1:
            new = self.pool.allocate(1)[0]
            copy = (pages[-1], new)
            self.pool.free([pages[-1]])
            pages = pages[:-1] + [new]
        return pages, entry.slot, copy

    def evict_lru(self, keep: CacheEntry | None = None) -> bool:
        """Free the least recently used entry (never `keep`); False if none is left."""
        candidates = [e for e in self.entries if e is not keep]
        if not candidates:
            return False
        victim = min(candidates, key=lambda e: e.last_used)
        self.entries.remove(victim)
        self.version += 1
        self.pool.free(victim.pages)
        if victim.slot is not None:
            self.slots.free(victim.slot)
        return True

    def clear(self) -> None:
        while self.evict_lru():
            pass


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
