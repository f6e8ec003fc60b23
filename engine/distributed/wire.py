"""The messages rank 0 broadcasts: what every rank must run, in the same order.

A message is a fixed header of HEADER int32 (its kind and sizes), then for some kinds
a payload of int32 whose length the header gives. Both go out as an all_sum in which
every other rank contributes zeros: the collective every backend has (ring, JACCL,
NCCL, MPI), and on rank 0 a lazy op like any other, so a forward's plan costs no
host sync there (a decode's input ids can still be on the device, sampled by the
step before). Followers read the header on the host, then the payload.

Order is the contract: every rank must issue the same collectives in the same order.
On rank 0 each message's all_sum depends on the one before (``_chain``), and a
forward's payload feeds that forward, so the device runs them in program order.

A forward's payload, per group of rows: tokens [B*T], offsets [B], lengths [B],
positions [B*T], slot_mapping [B*T], block_tables [B*P], state_slots [B], and
route_rows [B] when the view has them.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from engine.core.batch_view import BatchView
from engine.distributed.traffic import TRAFFIC

HEADER = 32
MAX_GROUPS = 3
_GROUP_FIELDS = 7

START, FORWARD, COPY_PAGES, COPY_STATE, SHUTDOWN = 1, 2, 3, 4, 5
PLAIN, COMPILED, GROUPS = 0, 1, 2        # how a forward is run

# Header of a forward: kind, num_groups, private cache pages (0: the runner's own
# cache), private cache slots, mode, payload length, then per group:
# B, T, P, flags, context_len (-1: None), page_size, (unused).
_RAGGED, _ALL_LOGITS, _ANY_FRESH, _ROUTED = 1, 2, 4, 8


class WireError(RuntimeError):
    """A message no rank 0 of this version sends (ranks of different versions)."""


@dataclass(frozen=True)
class ForwardMessage:
    groups: list[tuple[mx.array, BatchView]]
    cache_pages: int        # 0: the runner's cache; else a private cache of this size
    cache_slots: int
    mode: int               # PLAIN, COMPILED (Runner.forward) or GROUPS (forward_groups)


class Wire:
    def __init__(self, group):
        self.group = group
        self.is_leader = group.rank() == 0
        self._chain: mx.array | None = None     # rank 0: the last message's collective

    # -- rank 0 ----------------------------------------------------------------
    def send(self, header: list[int], payload: mx.array | None = None) -> mx.array | None:
        """Broadcast a header (and payload, int32); returns the payload as every rank
        received it (lazy), for rank 0 to use in place of its own."""
        h = np.zeros(HEADER, np.int32)
        h[:len(header)] = header
        sent = mx.array(h)
        if self._chain is not None:
            sent = sent + self._chain * 0               # after the previous message
        got = mx.distributed.all_sum(sent, group=self.group)
        self._chain = got[0]
        TRAFFIC.all_sum(HEADER * 4, self.group.size(), plan=True)
        if payload is None:
            return None
        got = mx.distributed.all_sum(payload.astype(mx.int32) + self._chain * 0,
                                     group=self.group)
        self._chain = got[0]
        TRAFFIC.all_sum(payload.size * 4, self.group.size(), plan=True)
        return got

    def send_forward(self, groups: list[tuple], cache_pages: int = 0, cache_slots: int = 0,
                     mode: int = PLAIN) -> list[tuple[mx.array, BatchView]]:
        """Broadcast one forward's groups of (tokens [B, T], view); returns them rebuilt
        from what was broadcast (rank 0 runs exactly what the others run)."""
        if len(groups) > MAX_GROUPS:
            raise ValueError(f"at most {MAX_GROUPS} groups in one forward")
        header, parts = [], []
        for tokens, view in groups:
            header += _group_header(view)
            parts += _group_arrays(tokens, view)
        payload = mx.concatenate([p.reshape(-1).astype(mx.int32) for p in parts])
        head = [FORWARD, len(groups), cache_pages, cache_slots, mode, payload.size]
        got = self.send(head + header, payload)
        return _unpack_groups(header, got)

    def close(self) -> None:
        """The shutdown message, evaluated now (nothing later would)."""
        self.send([SHUTDOWN])
        mx.eval(self._chain)

    # -- ranks 1..N-1 ------------------------------------------------------------
    def receive_header(self) -> list[int]:
        got = mx.distributed.all_sum(mx.zeros(HEADER, mx.int32), group=self.group)
        return got.tolist()            # waits for rank 0's next message

    def receive_payload(self, size: int) -> mx.array:
        return mx.distributed.all_sum(mx.zeros(size, mx.int32), group=self.group)

    def receive_forward(self, header: list[int]) -> ForwardMessage:
        _, n, pages, slots, mode, size = header[:6]
        if not 0 < n <= MAX_GROUPS:
            raise WireError(f"a forward of {n} groups")
        fields = header[6:6 + n * _GROUP_FIELDS]
        return ForwardMessage(_unpack_groups(fields, self.receive_payload(size)),
                              pages, slots, mode)


def _group_header(view: BatchView) -> list[int]:
    flags = ((_RAGGED if view.ragged else 0) | (_ALL_LOGITS if view.all_logits else 0)
             | (_ANY_FRESH if view.any_fresh else 0)
             | (_ROUTED if view.route_rows is not None else 0))
    return [view.batch_size, view.num_tokens, view.block_tables.shape[1], flags,
            -1 if view.context_len is None else view.context_len, view.page_size, 0]


def _group_arrays(tokens, view: BatchView) -> list[mx.array]:
    tokens = tokens if isinstance(tokens, mx.array) else mx.array(tokens, mx.int32)
    out = [tokens, view.offsets, view.lengths, view.positions, view.slot_mapping,
           view.block_tables, view.state_slots]
    return out + ([view.route_rows] if view.route_rows is not None else [])


def _unpack_groups(fields: list[int], payload: mx.array) -> list[tuple[mx.array, BatchView]]:
    out, at = [], 0

    def take(n: int, shape: tuple[int, ...]) -> mx.array:
        nonlocal at
        part = payload[at:at + n].reshape(shape)
        at += n
        return part

    for g in range(len(fields) // _GROUP_FIELDS):
        B, T, P, flags, context_len, page_size, _ = fields[g * _GROUP_FIELDS:
                                                           (g + 1) * _GROUP_FIELDS]
        tokens = take(B * T, (B, T))
        offsets, lengths = take(B, (B,)), take(B, (B,))
        positions, slot_mapping = take(B * T, (B, T)), take(B * T, (B, T))
        tables, slots = take(B * P, (B, P)), take(B, (B,))
        route = take(B, (B,)) if flags & _ROUTED else None
        out.append((tokens, BatchView(
            offsets=offsets, lengths=lengths, positions=positions, slot_mapping=slot_mapping,
            block_tables=tables, state_slots=slots, page_size=page_size, num_tokens=T,
            ragged=bool(flags & _RAGGED), all_logits=bool(flags & _ALL_LOGITS),
            context_len=None if context_len < 0 else context_len,
            any_fresh=bool(flags & _ANY_FRESH), route_rows=route)))
    return out
