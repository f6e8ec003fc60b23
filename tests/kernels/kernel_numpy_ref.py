"""Independent float64 numpy references for the kernel tests (no kernel code; mx only to copy arrays out)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np


def to_np(x: mx.array) -> np.ndarray:
    """float32/int numpy copy of an mx array (bf16 goes through float32 exactly)."""
    if x.dtype in (mx.bfloat16, mx.float16):
        x = x.astype(mx.float32)
    return np.array(x)


def gdn(q, k, v, g, beta, state, lengths):
    """Gated delta rule over T tokens, row by row, head by head.

    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g (decay), beta [B, T, Hv];
    state [B, Hv, Dv, Dk] (already zero for fresh rows); lengths [B].
    Returns y [B, T, Hv, Dv] (0 past each length), state [B, Hv, Dv, Dk].
    """
    B, T, Hk, Dk = q.shape
    Hv = v.shape[2]
    S = state.astype(np.float64).copy()
    y = np.zeros(v.shape, dtype=np.float64)
    for b in range(B):
        for h in range(Hv):
            hk = h // (Hv // Hk)
            for t in range(int(lengths[b])):
                kt, qt = k[b, t, hk].astype(np.float64), q[b, t, hk].astype(np.float64)
                S[b, h] *= g[b, t, h]
                delta = (v[b, t, h] - S[b, h] @ kt) * beta[b, t, h]
                S[b, h] += np.outer(delta, kt)
                y[b, t, h] = S[b, h] @ qt
    return y, S


def paged_attention(q, k_pool, v_pool, block_tables, lengths, page_size, scale):
    """Per row and head: walk the block table key by key, softmax, weighted sum of values."""
    B, Hq, D = q.shape
    Hkv = k_pool.shape[1]
    out = np.zeros((B, Hq, D), dtype=np.float64)
    for b in range(B):
        rows = [block_tables[b, j // page_size] * page_size + j % page_size
                for j in range(int(lengths[b]))]
        for h in range(Hq):
            kv = h // (Hq // Hkv)
            keys = k_pool[rows, kv].astype(np.float64)                  # [L, D]
            vals = v_pool[rows, kv].astype(np.float64)
            s = keys @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[b, h] = p @ vals / p.sum()
    return out


def moe_route(logits, k, normalize):
    """Softmax, top-k by descending probability (lower id first on ties), renormalise."""
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    idx = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, idx, axis=-1)
    if normalize:
        w = w / w.sum(axis=-1, keepdims=True)
    return idx.astype(np.int32), w


def close(actual, expected, atol, rtol=0.0) -> bool:
    """The comparison every kernel test uses (and the planted-fault test attacks)."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return a.shape == e.shape and bool(np.all(np.abs(a - e) <= atol + rtol * np.abs(e)))


def dequantize4(w, scales, biases) -> np.ndarray:
    """float64 rows of 4-bit affine weights: w uint32 [.., cols/8] (weight t of a word in
    bits 4t..4t+3), scales and biases [.., cols/group]."""
    w = np.asarray(w, np.uint32)
    q = (w[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    q = q.reshape(*w.shape[:-1], -1).astype(np.float64)
    group = q.shape[-1] // np.shape(scales)[-1]
    s = np.repeat(np.asarray(scales, np.float64), group, axis=-1)
    b = np.repeat(np.asarray(biases, np.float64), group, axis=-1)
    return q * s + b


def moe_experts(x, idx, scores, gate_up, down, hidden):
    """y[n] = sum_j s[n, j] Wd[e] (silu(Wg[e] x[n]) * Wu[e] x[n]), e = idx[n, j]; gate rows
    [0, hidden) and up rows [hidden, 2 hidden) of gate_up. Returns (y, |terms| sums) [N, D]:
    the second is the sum of the absolute values of y's terms (for rounding bounds)."""
    N, K = idx.shape
    wgu = {e: dequantize4(*(a[e] for a in gate_up)) for e in set(idx.reshape(-1).tolist())}
    wd = {e: dequantize4(*(a[e] for a in down)) for e in wgu}
    y = np.zeros((N, down[0].shape[1]))
    mag = np.zeros_like(y)
    for n in range(N):
        for j in range(K):
            e = int(idx[n, j])
            gu = wgu[e] @ x[n].astype(np.float64)
            g, u = gu[:hidden], gu[hidden:2 * hidden]
            h = g / (1.0 + np.exp(-g)) * u
            y[n] += scores[n, j] * (wd[e] @ h)
            mag[n] += abs(scores[n, j]) * (np.abs(wd[e]) @ np.abs(h))
    return y, mag
