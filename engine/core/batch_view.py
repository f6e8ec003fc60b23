"""What one forward pass needs to know about the rows it runs.

A forward runs B rows of T new tokens each (decode: T=1; prefill: one or more
chunks, right-padded when ragged). The runner builds a BatchView from the
scheduled sequences; models and layers only read it.

Conventions every model follows:
- Page 0 of the KV pool is a scratch page that is never handed out: padded
  tokens write their K/V there, and padded block-table entries point at it.
  Keys are laid out so that gathered key index j is absolute position j.
- A row whose ``offsets`` is 0 starts a new sequence: recurrent layers must
  treat the state gathered from its slot as zero (slots are reused).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import mlx.core as mx


@dataclass(frozen=True)
class BatchView:
    offsets: mx.array       # [B] int32: tokens already in the cache per row
    lengths: mx.array       # [B] int32: valid new tokens per row (1..T)
    positions: mx.array     # [B, T] int32: absolute position of each new token
    slot_mapping: mx.array  # [B, T] int32: flat KV slot (page * page_size + i) to write
    block_tables: mx.array  # [B, P] int32: page ids covering positions 0..P*page_size-1
    state_slots: mx.array   # [B] int32: row of each recurrent-state slot array
    page_size: int
    num_tokens: int         # T
    ragged: bool            # some row has lengths < T
    all_logits: bool = False  # True: logits for every token; False: only each row's last
    # Set when every row has the same offset and T real tokens: each row then sees
    # exactly keys 0..context_len-1, and attention needs no mask array (causal or none).
    context_len: int | None = None
    # Some row starts a sequence (offset 0). Decode steps never do, so they skip the
    # zeroing of reused state slots altogether.
    any_fresh: bool = True
    # Decode with padding rows (engine/core/runner.py): [B] int32, the row whose routed
    # experts each row uses (padding rows take row 0's: they read no extra experts).
    route_rows: mx.array | None = None

    @property
    def batch_size(self) -> int:
        return self.offsets.shape[0]

    @property
    def kv_len(self) -> int:
        """Keys gathered per row (whole pages)."""
        return self.block_tables.shape[1] * self.page_size

    @cached_property
    def kv_index(self) -> mx.array:
        """[B, L] flat pool slot of each row's key j (L: context_len when set, else
        kv_len). Built once per forward, on first use, not once per layer and K/V."""
        ps = self.page_size
        idx = self.block_tables[:, :, None] * ps + mx.arange(ps, dtype=mx.int32)  # [B, P, ps]
        idx = idx.reshape(self.batch_size, -1)                                  # [B, L]
        return idx if self.context_len is None else idx[:, :self.context_len]

    @cached_property
    def context_lens(self) -> mx.array:
        """[B] int32: keys each row sees after this forward (offsets + lengths), once
        per forward."""
        return self.offsets + self.lengths

    @cached_property
    def fresh_rows(self) -> mx.array:
        """[B] bool: the row starts a sequence (offset 0), its reused state slots read as
        zero; once per forward, not one compare per recurrent layer and kernel."""
        return self.offsets == 0

    def tail_index(self, keep: int) -> mx.array:
        """[B, keep] int32: where each row's last `keep` inputs sit in [keep earlier
        inputs, then the chunk's T] (token t at keep + t, so a row of length L ends with
        L .. L+keep-1); once per forward and keep, not per layer."""
        made = self.__dict__.setdefault("_tail_index", {})   # frozen: as cached_property
        if keep not in made:
            made[keep] = self.lengths[:, None] + mx.arange(keep, dtype=mx.int32)
        return made[keep]

    @cached_property
    def causal_mask(self) -> mx.array:
        """[B, 1, T, L] bool: query at position p sees keys 0..p of its own row (once
        per forward)."""
        keys = mx.arange(self.kv_len, dtype=mx.int32)
        return (keys[None, None, :] <= self.positions[:, :, None])[:, None]

    def last_index(self) -> mx.array:
        """[B] index of each row's last valid token."""
        return self.lengths - 1

