"""Finished turns kept for the next turn of the same conversation: the index of
entries only. Pure Python, no mlx; the pages and slots an entry holds are
allocated, shared and freed by the cache manager (cache_manager.py).

An entry holds the ids whose K/V (and state) are in the cache, their pages and
the state slot. A new prompt that starts with an entry's ids takes the entry
over (a conversation goes on linearly; a branch simply misses). Attention-only
models can also reuse a shorter common prefix (later pages are dropped and
overwritten); models with a recurrent state cannot rewind it, so they reuse an
entry only when all of its ids are a prefix of the new prompt.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class CacheEntry:
    ids: tuple[int, ...]
    pages: list[int]
    slot: int | None
    last_used: int


class PrefixCache:
    def __init__(self, exact_prefix_only: bool, max_entries: int):
        self.exact_prefix_only = exact_prefix_only
        self.max_entries = max_entries
        self.entries: list[CacheEntry] = []
        self._clock = 0
        self.version = 0        # changes whenever entries change: matches can be reused

    @property
    def num_pages(self) -> int:
        return sum(len(e.pages) for e in self.entries)

    @property
    def is_over_capacity(self) -> bool:
        return len(self.entries) > self.max_entries

    def put(self, ids: list[int], pages: list[int], slot: int | None) -> CacheEntry:
        self._clock += 1
        self.version += 1
        entry = CacheEntry(tuple(ids), pages, slot, self._clock)
        self.entries.append(entry)
        return entry

    def remove(self, entry: CacheEntry) -> None:
        self.entries.remove(entry)
        self.version += 1

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

    def least_recently_used(self, keep: CacheEntry | None = None) -> CacheEntry | None:
        candidates = [e for e in self.entries if e is not keep]
        return min(candidates, key=lambda e: e.last_used) if candidates else None


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
