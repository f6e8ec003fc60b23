"""The disk prompt cache over several ranks: rank 0 owns the cache, every rank its part.

A kept turn is saved as one file holding every rank's part: each rank gathers its
K/V rows and state slot (disk_transfer.gather_save) and an all_gather joins them on
rank 0, K/V along the head axis ([n, N*H_local, D]) and states along their first axis
([N*S0, ...]). A load is the reverse: rank 0 reads the file, broadcasts each tensor,
and every rank writes its own slice into the pages and slot rank 0 chose. The
schema says the joined shapes, so the cache's identity (engine/cache/model_identity)
tells a file of N ranks from one of another layout: where the joined layout is the
one-process layout (a Llama's K/V heads split without repeats), the files are the
same, and either reads the other's.
"""
from __future__ import annotations

import mlx.core as mx

from engine.core import pool_scatters
from engine.core.disk_transfer import gather_save, token_rows
from engine.models.base import ModelCache


def joined_schema(schema: dict[str, tuple], size: int) -> dict[str, tuple]:
    """One rank's disk schema -> the schema of the file holding all size ranks' parts."""
    return {name: (code, _joined_shape(name, shape, size))
            for name, (code, shape) in schema.items()}


def _joined_shape(name: str, shape: tuple[int, ...], size: int) -> tuple[int, ...]:
    return (size * shape[0], *shape[1:])      # kv: (heads, D); states: their own shape


def gather_parts(wire, cache: ModelCache, pages: list[int], num_tokens: int,
                 slot: int | None) -> dict[str, mx.array]:
    """Every rank: this rank's part of a kept turn, joined over ranks (on rank 0; the
    others' results are not used)."""
    save = _Save(pages, num_tokens)
    out = {}
    for name, part in gather_save(cache, save, slot).items():
        if name.startswith("kv."):                               # [n, H_l, D]
            joined = wire.gather(part.transpose(1, 0, 2))        # [N*H_l, n, D]
            out[name] = joined.transpose(1, 0, 2)                # [n, N*H_l, D]
        else:
            out[name] = wire.gather(part)                        # [N*S0, ...]
    return out


def scatter_load(wire, cache: ModelCache, pages: list[int], num_tokens: int,
                 slot: int | None, tensors: dict[str, mx.array] | None) -> None:
    """Every rank: receive a loaded turn (tensors: rank 0's, joined, on the device)
    and write this rank's part into its pages and slot (lazy)."""
    rank, size = wire.group.rank(), wire.group.size()
    rows = token_rows(pages, num_tokens, cache.page_size)
    for i, pair in enumerate(cache.kv):
        for j, part in enumerate("kv"):
            name = f"kv.{i}.{part}"
            _, H, D = pair[j].shape
            full = wire.broadcast(None if tensors is None else tensors[name],
                                  (num_tokens, size * H, D), pair[j].dtype)
            pair[j][rows] = full[:, rank * H:(rank + 1) * H]
    pool_scatters.note()        # queued on a GPU only once no earlier reader holds a pool
    if slot is None:
        return
    index = mx.array([slot])
    for i, layer in enumerate(cache.states):
        for j, arr in enumerate(layer):
            name = f"state.{i}.{j}"
            S0 = arr.shape[1]
            full = wire.broadcast(None if tensors is None else tensors[name],
                                  (size * S0, *arr.shape[2:]), arr.dtype)
            arr[index] = full[rank * S0:(rank + 1) * S0][None]
            layer[j] = arr


class _Save:
    """What gather_save reads of a DiskSave (a follower has no DiskSave)."""

    def __init__(self, pages: list[int], num_tokens: int):
        self.pages, self.ids = pages, range(num_tokens)
