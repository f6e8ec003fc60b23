"""Grouped-query attention over the paged KV pool, shared by every model family."""
from __future__ import annotations

import mlx.core as mx

from engine.core.batch_view import BatchView
from kernels.kernel_set import KernelSet


def write_kv(pool: mx.array, new: mx.array, view: BatchView) -> mx.array:
    """Scatter new K or V [B, Hkv, T, D] into the flat pool at the view's slots."""
    B, H, T, D = new.shape
    rows = new.transpose(0, 2, 1, 3).reshape(B * T, H, D)  # [B*T, Hkv, D]
    pool[view.slot_mapping.reshape(-1)] = rows.astype(pool.dtype)
    return pool


def gather_kv(pool: mx.array, view: BatchView) -> mx.array:
    """Read each row's keys through its block table: [B, Hkv, L, D], L = the context
    length when every row shares it (nothing past it is read), else kv_len."""
    return pool[view.kv_index].transpose(0, 2, 1, 3)


def paged_attention(q: mx.array, k: mx.array, v: mx.array, kv: list[mx.array],
                    view: BatchView, scale: float, kernels: KernelSet) -> mx.array:
    """q [B, Hq, T, D], new k/v [B, Hkv, T, D]; kv = [k_pool, v_pool] updated in place.

    Returns [B, Hq, T, D]. The K/V of the new tokens are written first, so a
    prefill chunk attends to the cached prefix and to itself in one call.
    """
    kv[0] = write_kv(kv[0], k, view)
    kv[1] = write_kv(kv[1], v, view)
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
    than this for 100+ keys: docs/PERFORMANCE.md). q [B, Hq, 1, D], keys/values
    [B, Hkv, L, D], mask None or [B, 1, 1, L] bool -> [B, Hq, 1, D]."""
    B, Hq, _, D = q.shape
    Hkv = keys.shape[1]
    qg = (q * scale).reshape(B, Hkv, Hq // Hkv, D)                  # [B, Hkv, G, D]
    scores = qg @ keys.swapaxes(-1, -2)                               # [B, Hkv, G, L]
    if mask is not None:
        scores = mx.where(mask, scores, mx.array(-mx.inf, scores.dtype))
    probs = mx.softmax(scores, axis=-1, precise=True)
    return (probs @ values).reshape(B, Hq, 1, D)
