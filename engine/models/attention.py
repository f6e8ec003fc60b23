"""Grouped-query attention over the paged KV pool, shared by every model family."""
from __future__ import annotations

import mlx.core as mx

from engine.core import pool_scatters
from engine.core.batch_view import BatchView
from engine.models.shapes import reshaped
from kernels.kernel_set import KernelSet


def write_kv(pool: mx.array, new: list[mx.array], views: list[BatchView]) -> mx.array:
    """Scatter every group's new K or V [B_g, Hkv, T_g, D] into the flat pool at its
    views' slots, in ONE scatter for all groups of a forward.

    Why one: MLX updates an array in place only when nothing else still holds it. A
    second scatter into the pool that the first group's attention still reads forces
    a copy of the whole pool (per layer, per K and V): a mixed step (decode rows and a
    prompt chunk) then touched memory in proportion to the pool, not to its tokens
    (issue 21: 164 MB extra per step on a 330 MB pool). Writing all groups first and
    reading after keeps every step's extra traffic proportional to its tokens. On a GPU a
    reader queued before (the previous step's attention) holds the pool too, until the
    GPU has run it: the step queues this scatter after a wait (engine/core/pool_scatters)."""
    rows = [n.transpose(0, 2, 1, 3).reshape(-1, n.shape[1], n.shape[3]) for n in new]  # [B*T, Hkv, D]
    slots = [reshaped(v.slot_mapping, -1) for v in views]
    if len(rows) > 1:
        rows, slots = [mx.concatenate(rows, axis=0)], [mx.concatenate(slots)]
    pool[slots[0]] = rows[0].astype(pool.dtype)                     # [sum B*T, Hkv, D]
    pool_scatters.note()        # queued on a GPU only once no earlier reader holds the pool
    return pool


def gather_kv(pool: mx.array, view: BatchView) -> mx.array:
    """Read each row's keys through its block table: [B, Hkv, L, D], L = the context
    length when every row shares it (nothing past it is read), else kv_len."""
    return pool[view.kv_index].transpose(0, 2, 1, 3)


def grouped_paged_attention(qkv: list[tuple[mx.array, mx.array, mx.array]],
                            kv: list[mx.array], views: list[BatchView], scale: float,
                            kernels: KernelSet) -> list[mx.array]:
    """Per group (q [B, Hq, T, D], new k/v [B, Hkv, T, D]) -> outputs [B, Hq, T, D];
    kv = [k_pool, v_pool] updated in place.

    The new tokens' K/V of every group are written first (write_kv), so a prefill chunk
    attends to the cached prefix and to itself, and no write follows a read."""
    kv[0] = write_kv(kv[0], [k for _, k, _ in qkv], views)
    kv[1] = write_kv(kv[1], [v for _, _, v in qkv], views)
    return [attend(q, kv, view, scale, kernels) for (q, _, _), view in zip(qkv, views)]


def merge_heads(o: mx.array) -> mx.array:
    """[B, H, T, D] -> [B, T, H*D]."""
    B, H, T, D = o.shape
    return o.transpose(0, 2, 1, 3).reshape(B, T, H * D)


def attend(q: mx.array, kv: list[mx.array], view: BatchView, scale: float,
           kernels: KernelSet) -> mx.array:
    """q [B, Hq, T, D] over the pools, whose K/V already hold this forward's tokens."""
    if view.num_tokens == 1:
        # Decode: the kernel reads K/V through the block tables, without gathering them.
        out = kernels.paged_decode_attention(q[:, :, 0], kv[0], kv[1], view.block_tables,
                                             view.context_lens, view.page_size, scale)
        if out is not None:
            return out[:, :, None]                                          # [B, Hq, 1, D]
    keys = gather_kv(kv[0], view).astype(q.dtype)
    values = gather_kv(kv[1], view).astype(q.dtype)
    if view.context_len is not None:
        # Keys are exactly 0..context_len-1: the chunk's queries are the last T positions,
        # which is SDPA's own causal alignment (no mask array to build or read).
        mask = "causal" if view.num_tokens > 1 else None
    else:
        mask = view.causal_mask
    if mx.default_device() == mx.cpu and view.num_tokens == 1:
        return _cpu_decode_attention(q, keys, values, scale, mask)
    return mx.fast.scaled_dot_product_attention(q, keys, values, scale=scale, mask=mask)


def _cpu_decode_attention(q: mx.array, keys: mx.array, values: mx.array, scale: float,
                          mask: mx.array | None) -> mx.array:
    """Decode attention as two batched matmuls (MLX 0.32's CPU SDPA fallback is slower
    than this for 100+ keys: docs/bench/HISTORY.md). q [B, Hq, 1, D], keys/values
    [B, Hkv, L, D], mask None or [B, 1, 1, L] bool -> [B, Hq, 1, D]."""
    B, Hq, _, D = q.shape
    Hkv = keys.shape[1]
    qg = (q * scale).reshape(B, Hkv, Hq // Hkv, D)                  # [B, Hkv, G, D]
    scores = qg @ keys.swapaxes(-1, -2)                               # [B, Hkv, G, L]
    if mask is not None:
        scores = mx.where(mask, scores, mx.array(-mx.inf, scores.dtype))
    probs = mx.softmax(scores, axis=-1, precise=True)
    return (probs @ values).reshape(B, Hq, 1, D)
