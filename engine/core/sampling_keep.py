"""Which ids the sampling filters keep (top-k, top-p, min-p), exactly, and the sums they
need: engine/core/sampler.py's filter step, apart from its drawing and bookkeeping.

Exact means the kept set is the one a stable sort by probability would give (ties at a
cut keep the lowest ids), up to float32 rounding of the sums; the sums are taken in
blocks (`row_sum`, `_running_sum`) because MLX's CPU sum runs one accumulator down a
248k-id row (3e-4 relative error there).
"""
from __future__ import annotations

import mlx.core as mx

from engine.core.sampling_rows import GraphShape

_LOG2_E = 1.4426950408889634
_SUM_BLOCK = 256
_SCAN_BLOCK = 16  # _running_sum's tree: levels of 16 (4 levels at V = 248k)
_BISECTION_STEPS = 31  # halvings of an int32 key range narrower than 2**31
# MLX's CUDA sort (mx.sort, mx.topk) runs one block per row on grid.y, at most 65,535:
# more rows fail at launch ("cudaGraphAddKernelNode ... invalid argument").
_MAX_SORT_ROWS = 65535


def exp_weights(x: mx.array) -> mx.array:
    # exp as 2**(x*log2 e): ~3x faster than mx.exp on MLX's CPU backend, same to float
    # rounding (a relative 1e-7 * |x| on weights of e^x; x <= 0 here).
    return mx.power(2.0, x * _LOG2_E)


def keep_mask(d: mx.array, weights: mx.array, arrays: dict, shape: GraphShape,
              kernels=None) -> mx.array:
    """Which ids survive top-k, then top-p over the top-k mass, then min-p. [B, V] bool.
    Ties at a cut (equal d) keep the lowest ids first, as a stable sort would."""
    keep = None                             # all (no [B, V] array of ones to fill)
    if shape.width:
        rank_keep = _top_k_keep(d, shape.width, arrays["k"], arrays["rank_top_p"],
                                arrays["top_p_off"])
        keep = mx.where(arrays["by_rank"], rank_keep, True)
    if shape.by_mass:
        mass_keep = _top_p_keep(d, weights, arrays["mass_top_p"], kernels)
        keep = mx.where(arrays["by_mass"], mass_keep, True if keep is None else keep)
    # min-p: keep p >= min_p * p_max, i.e. d >= log(min_p); log(0) = -inf keeps all.
    min_p_keep = d >= mx.log(arrays["min_p"])
    return min_p_keep if keep is None else keep & min_p_keep


def _tie_rank(ties: mx.array) -> mx.array:
    """How many earlier ids of the row are also ties. [B, V] int32."""
    count = ties.astype(mx.int32)
    return mx.cumsum(count, axis=-1) - count


def _top_k_keep(d: mx.array, width: int, k: mx.array, top_p: mx.array,
                top_p_off: mx.array) -> mx.array:
    """top-k, then top-p over the renormalized top-k mass, from the sorted top `width`
    values only (no full sort): the cut's value and how many ids it keeps. k, top_p,
    top_p_off: [B, 1] (k at least 1)."""
    if d.shape[0] > _MAX_SORT_ROWS:     # rows are independent: sort them in slices
        n = _MAX_SORT_ROWS
        return mx.concatenate([_top_k_keep(d[i:i + n], width, k[i:i + n], top_p[i:i + n],
                                           top_p_off[i:i + n])
                               for i in range(0, d.shape[0], n)])
    best = mx.topk(d, width, axis=-1)
    best = mx.sort(best, axis=-1)[:, ::-1]                             # [B, K] best first
    rank = mx.arange(width)[None, :]                                   # [1, K]
    in_k = rank < k                                                    # [B, K]
    probs = mx.where(in_k, exp_weights(best), 0.0)                     # [B, K]
    if width > _SUM_BLOCK:      # a large k: one running sum down 248k ids is 3e-4 off on a CPU
        mass_before, total = _running_sum(probs) - probs, row_sum(probs)
    else:
        mass_before = mx.cumsum(probs, axis=-1) - probs                # [B, K]
        total = mx.sum(probs, axis=-1, keepdims=True)
    target = top_p * total                                             # [B, 1]
    # Rank 0 always survives (mass before it is 0); the count is the kept prefix length.
    kept = in_k & ((mass_before < target) | top_p_off)                 # [B, K]
    count = mx.sum(kept, axis=-1, keepdims=True)                       # [B, 1] >= 1
    cut = mx.take_along_axis(best, count - 1, axis=-1)                 # [B, 1] last kept value
    above = d > cut                                                    # [B, V]
    at_cut = d == cut
    room = count - mx.sum(above, axis=-1, keepdims=True)               # ties the cut keeps
    return above | (at_cut & (_tie_rank(at_cut) < room))


def _top_p_keep(d: mx.array, weights: mx.array, p: mx.array, kernels=None) -> mx.array:
    """top-p (p [B, 1]) over the whole vocabulary without sorting: bisection on the cut's value.

    key = the int32 bits of -d >= 0, ordered like -d (smaller = likelier). The cut is
    the largest key t whose strictly-likelier mass G(t) = sum(w[key < t]) is below
    top_p * total: such a t always belongs to an id (G jumps there). The search keeps
    G(lo) < target <= G(hi); every id with -d >= log(V / (1 - top_p)) + 1 holds
    under (1 - top_p) / e of the mass together, so that bound's key starts `hi`, and
    31 halvings of a range under 2**31 end at hi = lo + 1, lo the cut.
    """
    key = (0.0 - d).view(mx.int32)                                     # [B, V], 0 - 0 = +0
    target = p * row_sum(weights)                                      # [B, 1]
    # kernels/top_p_cut where the model's kernel set runs it: the cut and the last tie it
    # keeps, the same set without the bisection's ~190 launches or the ties' running sum
    # below (together ~0.9 ms of GPU a B = 1 sampling call on the H100, session 34)
    cut = kernels.top_p_cut(key, weights, target) if kernels is not None else None
    if cut is not None:
        ids = mx.arange(key.shape[-1], dtype=mx.int32)                 # [V]
        return (key < cut[:, :1]) | ((key == cut[:, :1]) & (ids <= cut[:, 1:]))
    bound = mx.log(d.shape[-1] / mx.maximum(1.0 - p, 1e-30)) + 1.0     # [B, 1]
    lo = _bisect_cut(key, weights, target, mx.minimum(bound, 3.0e38).view(mx.int32))
    above = key < lo                                                   # [B, V] likelier than the cut
    at_cut = key == lo
    tied = mx.where(at_cut, weights, 0.0)
    before = _mass_before(key, weights, lo) + mx.cumsum(tied, axis=-1) - tied
    return above | (at_cut & (before < target))


@mx.compile
def _bisect_cut(key: mx.array, weights: mx.array, target: mx.array, hi: mx.array) -> mx.array:
    """The largest key with G(key) < target, given G(0) < target <= G(hi). [B, 1] int32.
    Compiled: one graph of the fixed steps, not ~400 separately dispatched ops."""
    lo = mx.zeros(hi.shape, dtype=mx.int32)
    for _ in range(_BISECTION_STEPS):
        mid = lo + (hi - lo) // 2
        below = _mass_before(key, weights, mid) < target               # [B, 1]
        lo = mx.where(below, mid, lo)
        hi = mx.where(below, hi, mid)
    return lo


def _mass_before(key: mx.array, weights: mx.array, cut: mx.array) -> mx.array:
    return row_sum(mx.where(key < cut, weights, 0.0))                  # [B, 1]


def row_sum(x: mx.array) -> mx.array:
    """Row sums of [B, V] in two levels (blocks of 256, then blocks): MLX's CPU sum runs
    one accumulator down the row, 3e-4 relative error at V = 248k; this is ~3e-7."""
    rows, cols = x.shape
    whole = cols // _SUM_BLOCK * _SUM_BLOCK
    blocks = x[:, :whole].reshape(rows, -1, _SUM_BLOCK).sum(axis=-1)  # [B, V / 256]
    total = blocks.sum(axis=-1, keepdims=True)                         # [B, 1]
    return total if whole == cols else total + x[:, whole:].sum(axis=-1, keepdims=True)


def _running_sum(x: mx.array) -> mx.array:
    """cumsum of [B, V] along V as a tree: a running sum within blocks of 16, plus the
    running sum of the blocks before, itself taken the same way. A single running
    accumulator down 248k ids is 3e-4 off on a CPU, and blocks of 256 still ~1e-6 of the
    total, the mass of one id at a 248k vocabulary's top-p cut; this is ~1e-7. [B, V]"""
    rows, cols = x.shape
    if cols <= _SCAN_BLOCK:
        return mx.cumsum(x, axis=-1)
    pad = -cols % _SCAN_BLOCK
    blocks = (mx.pad(x, [(0, 0), (0, pad)]) if pad else x).reshape(rows, -1, _SCAN_BLOCK)
    within = mx.cumsum(blocks, axis=-1)                                # [B, V / 16, 16]
    block_sums = within[:, :, -1]                                      # [B, V / 16]
    before = _running_sum(block_sums) - block_sums
    out = (within + before[:, :, None]).reshape(rows, -1)
    return out[:, :cols] if pad else out
