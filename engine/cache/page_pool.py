"""Fixed-size KV pages and recurrent-state slots: pure Python free lists, no mlx.

Only the cache manager (cache_manager.py) allocates from them.

Page 0 is the scratch page (padded tokens write there) and is never handed out.
Pages are reference-counted so a kept turn and a running one can share them.
"""
from __future__ import annotations

from engine.arith import ceil_div


class PagePool:
    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 2:
            raise ValueError("a pool needs the scratch page and at least one more")
        self.num_pages = num_pages
        self.page_size = page_size
        self._free = list(range(num_pages - 1, 0, -1))  # pop() hands out low ids first
        self._refs = [0] * num_pages

    @property
    def num_total(self) -> int:
        return self.num_pages - 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def free_ids(self) -> tuple[int, ...]:
        return tuple(self._free)

    @property
    def num_used(self) -> int:
        return self.num_total - self.num_free

    def pages_for(self, num_tokens: int) -> int:
        return ceil_div(num_tokens, self.page_size)

    def can_allocate(self, num_pages: int) -> bool:
        return num_pages <= len(self._free)

    def allocate(self, num_pages: int) -> list[int]:
        if not self.can_allocate(num_pages):
            raise MemoryError(f"KV pool exhausted: want {num_pages}, have {self.num_free}")
        pages = [self._free.pop() for _ in range(num_pages)]
        for p in pages:
            self._refs[p] = 1
        return pages

    def refcount(self, page: int) -> int:
        return self._refs[page]

    def share(self, pages: list[int]) -> None:
        for p in pages:
            self._refs[p] += 1

    def free(self, pages: list[int]) -> None:
        for p in pages:
            if self._refs[p] <= 0:
                raise ValueError(f"page {p} freed twice")
            self._refs[p] -= 1
            if self._refs[p] == 0:
                self._free.append(p)


class SlotPool:
    """Rows of the recurrent-state slot arrays, one per running sequence."""

    def __init__(self, num_slots: int):
        self._free = list(range(num_slots - 1, -1, -1))
        self.num_slots = num_slots

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def free_ids(self) -> tuple[int, ...]:
        return tuple(self._free)

    def allocate(self) -> int:
        return self._free.pop()

    def free(self, slot: int) -> None:
        self._free.append(slot)
