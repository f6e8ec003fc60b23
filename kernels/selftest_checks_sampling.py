"""The start-up self-test's checks of the sampler's kernels: kernels/top_p_cut.py (top-p's
cut) and kernels/cdf_draw.py (the draw)."""
from __future__ import annotations

import mlx.core as mx

import kernels.cdf_draw as cd
import kernels.top_p_cut as tpc


def check_cdf_draw(backend: str) -> float:
    """18 rows of a peaked 300-id distribution (ids each worth up to ~10 % of a row, so a
    draw one id off misses by O(1e-2)), with runs of dropped ids at either end and in
    the middle, u spread over [0, 1) with 0 and the largest float32 below 1. The error:
    how far t = u x total lies outside the drawn id's slice of the row's running sum, as
    a share of the total (1 for an id without weight)."""
    rows, V = 18, 300
    logits = mx.random.normal((rows, V), key=mx.random.key(14)) * 3.0
    w = mx.power(2.0, (logits - logits.max(axis=-1, keepdims=True)) * 1.4426950408889634)
    ids = mx.arange(V)
    dropped = (ids < 40) | ((ids > 120) & (ids < 160)) | (ids >= 290) | (w < 1e-3)
    kept = mx.where(dropped & (mx.arange(rows)[:, None] % 3 > 0), 0.0, w)
    u = mx.concatenate([mx.array([0.0, 1.0 - 2.0 ** -24]),
                        (mx.arange(rows - 2) + 0.5) / (rows - 2)])[:, None]
    got = cd.kernel(kept, u, backend=backend)
    running = mx.cumsum(kept, axis=-1)
    total = running[:, -1:]
    t = u * total
    end = mx.take_along_axis(running, got[:, None], axis=-1)
    weight = mx.take_along_axis(kept, got[:, None], axis=-1)
    miss = mx.maximum(end - weight - t, t - end) / total
    miss = mx.where(weight > 0, miss, 1.0)
    return max(0.0, miss.max().item())


def check_top_p_cut(backend: str) -> float:
    """Rows of a sampler's keys and weights (a peaked row, a flat one, ties and dropped
    ids); the error is how far the kept set (the ids likelier than the cut, and its ties
    up to the last one kept) misses top-p's definition, as a share of the row's mass:
    with its last tie it holds at least target, without it less."""
    logits = mx.random.normal((3, 5003), key=mx.random.key(12)) * mx.array([[6.0], [0.5], [3.0]])
    logits = mx.concatenate([mx.round(logits[:2] * 4) / 4, logits[2:]], axis=0)     # ties
    logits = mx.where(mx.arange(5003) % 97 == 5, -mx.inf, logits)                  # dropped
    d = logits - mx.max(logits, axis=-1, keepdims=True)
    w = mx.power(2.0, d * 1.4426950408889634)
    key = (0.0 - d).view(mx.int32)
    total = w.sum(axis=-1, keepdims=True)
    target = mx.array([[0.95], [0.5], [0.999]]) * total
    out = tpc.kernel(key, w, target, backend=backend)
    cut, last = out[:, :1], out[:, 1:]
    at = key == cut
    mass = mx.where((key < cut) | (at & (mx.arange(5003) <= last)), w, 0.0).sum(
        axis=-1, keepdims=True)
    tie = mx.max(mx.where(at, w, 0.0), axis=-1, keepdims=True)
    miss = mx.maximum(mass - tie - target, target - mass) / total
    return max(0.0, miss.max().item())
