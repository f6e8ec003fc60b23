"""The CPU decode attention (two batched matmuls) against a float64 numpy reference."""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.models.attention import _cpu_decode_attention


def _reference(q, k, v, scale, lens):
    """Plain softmax(q k^T) v per row and head, grouped-query heads, keys past lens[b] unseen."""
    B, Hq, _, D = q.shape
    G = Hq // k.shape[1]
    out = np.zeros((B, Hq, 1, D))
    for b in range(B):
        for h in range(Hq):
            s = (q[b, h, 0] * scale) @ k[b, h // G, :lens[b]].T
            p = np.exp(s - s.max())
            out[b, h, 0] = (p / p.sum()) @ v[b, h // G, :lens[b]]
    return out


def test_matches_a_float64_reference_with_ragged_contexts_and_grouped_heads():
    rng = np.random.default_rng(0)
    B, Hq, Hkv, L, D = 3, 6, 2, 40, 16
    q, k, v = (rng.standard_normal(s) for s in ((B, Hq, 1, D), (B, Hkv, L, D), (B, Hkv, L, D)))
    lens = [40, 17, 1]
    mask = (np.arange(L)[None, :] < np.array(lens)[:, None])[:, None, None, :]   # [B,1,1,L]
    got = _cpu_decode_attention(mx.array(q, mx.float32), mx.array(k, mx.float32),
                                mx.array(v, mx.float32), 0.25, mx.array(mask))
    ref = _reference(q, k, v, 0.25, lens)
    assert np.abs(np.array(got) - ref).max() < 1e-5
    # Without a mask every key is seen.
    full = _cpu_decode_attention(mx.array(q, mx.float32), mx.array(k, mx.float32),
                                 mx.array(v, mx.float32), 0.25, None)
    assert np.abs(np.array(full) - _reference(q, k, v, 0.25, [L] * B)).max() < 1e-5
