"""Top-p's cut over a whole vocabulary without a sort: a radix select by mass, and the
last tie at the cut that top-p keeps.

The sampler (engine/core/sampler.py, `_top_p_keep`) ranks ids by key = the int32 bits
of -d >= 0 (d = scaled logit - row max <= 0; smaller key = likelier) and keeps those
likelier than the cut: the largest key t whose strictly-likelier mass
G(t) = sum(w[key < t]) is below target (= top_p x the row's total), and of the ids at t
(ties, all of one weight) the first in id order while the mass before each is below
target, as a stable sort would. Its plain path finds t by 31 halvings of the key range,
each a masked sum over the row (~190 launches and 31 passes over [B, V]: 1.0-2.2 ms on
the H200 at V = 248,320, session 11), and the ties by a running sum over the row. Here
8 passes of 4 bits (bits 30..27, ..., 6..3, then 2..0) find t: each pass sums the
weights of the ids inside the current prefix into 16 bins, and the cut's bin is the
last whose mass before it is below target, so the prefix gains 4 bits. Then the ties
are counted and the n-th found (`last_tie`).

CUDA: a pass a launch, each over blocks_per_row(V) blocks a row (61 at V = 248,320:
the whole GPU at B = 1); each launch's blocks first make the previous pass's decision
from its bins, all alike, then sum their own span; a launch decides the cut and counts
each block's ties, a last one finds the last tie kept (LAUNCHES in all). One block a row
did the cut in one launch, but left every SM but one idle at B = 1: 0.60 ms a step on
the H100 (session 32), 71 us this way (session 34). Metal: the cut (and its mass before) in
one threadgroup a row, the last tie by plain ops.

Deterministic: fixed summation trees whose shape depends on V alone (a thread's ids in
order, warps by shuffles, warps and blocks in order): the same row gives the same cut in
any batch. Off the exact mass by at most depth(V) roundings of the total (the tests'
bound).

key [B, V] int32 (>= 0), weights [B, V] float32, target [B, 1] float32 -> [B, 2] int32:
the cut, and the index of the last id at the cut that top-p keeps.
"""
from __future__ import annotations

import mlx.core as mx

import kernels.top_p_cut_src as tps
from kernels.kernel_build import KernelBuild, scalar

NAME = "top_p_cut"
METAL_THREADS = 1024    # Metal: one threadgroup a row; 32 simdgroups
BINS = 16
PASSES = ((27, 15), (23, 15), (19, 15), (15, 15), (11, 15), (7, 15), (3, 15), (0, 7))

# CUDA: many blocks a row, one launch a pass; Metal: one threadgroup a row (top_p_cut_src.py).
THREADS = 256       # a CUDA block's threads
SPAN = 4096         # ids a CUDA block reads a pass: 16 a thread, four a load
GROUPS = 16         # the decision sums each bin's blocks in 16 groups, then the groups
LAUNCHES = len(PASSES) + 2      # a pass a launch, the last decision + ties, the last tie
MAX_BLOCKS = 1024   # CUDA blocks a row the last launch holds in shared memory (V <= 4M)


def blocks_per_row(vocab: int) -> int:
    """CUDA blocks a row: the vocabulary's alone, so a row's sums are the same in any batch."""
    return -(-vocab // SPAN)


def depth(vocab: int, backend: str = "cuda") -> int:
    """Roundings deep of any mass the kernel compares with target (Higham 4.2's bound:
    |error| <= depth x 2**-24 x the row's total, its weights being >= 0). CUDA: a
    thread's ids into a bin (16), warps by shuffles (5), a block's 8 warps, a group's
    blocks, the 16 groups; Metal: a thread's ids (V / 1,024), simdgroups (5), the 32
    simdgroups. Then the running mass before each bin (16 adds a pass, 8 passes) and
    the target's own rounding (1)."""
    if backend == "metal":
        sums = -(-vocab // METAL_THREADS) + 5 + METAL_THREADS // 32
    else:
        sums = 16 + 5 + THREADS // 32 + -(-blocks_per_row(vocab) // GROUPS) + GROUPS
    return sums + 16 * len(PASSES) + 1


_METAL = KernelBuild(NAME, "tandem_top_p_cut", ["key", "weights", "target"],
                     ["cut", "cut_before"], "", tps.METAL_SOURCE)
_PASS = KernelBuild(NAME, "tandem_top_p_pass",
                    ["key", "weights", "target", "pass_no", "part_in", "prefix_in", "before_in"],
                    ["part", "prefix", "before"], tps.PASS_CUDA, "")
_TIES = KernelBuild(NAME, "tandem_top_p_ties",
                    ["key", "weights", "target", "part_in", "prefix_in", "before_in"],
                    ["cut", "cut_before", "ties", "tie_w"], tps.TIES_CUDA, "")
_LAST = KernelBuild(NAME, "tandem_top_p_last",
                    ["key", "target", "cut", "cut_before", "ties", "tie_w"], ["out"],
                    tps.LAST_CUDA, "")


def reference(key: mx.array, weights: mx.array, target: mx.array) -> mx.array:
    """Plain-mx float32, the same radix select pass by pass (slow, obviously the
    contract): [B, 2] int32, the largest key t with sum(w[key < t]) < target, and the
    index of the last tie at t the cut keeps (`last_tie`)."""
    rows = key.shape[0]
    prefix = mx.zeros((rows, 1), dtype=mx.int32)
    before = mx.zeros((rows, 1), dtype=mx.float32)
    for shift, mask in PASSES:
        high = shift + mask.bit_length()
        inside = (key >> high) == (prefix >> high) if high < 31 else mx.ones(key.shape, mx.bool_)
        digit = (key >> shift) & mask                                      # [B, V]
        bins = mx.stack([mx.sum(mx.where(inside & (digit == b), weights, 0.0), axis=-1)
                         for b in range(mask + 1)], axis=-1)               # [B, bins]
        at = before + mx.cumsum(bins, axis=-1, inclusive=False)            # mass before
        below = at < target                                                # [B, bins]
        chosen = mx.maximum(mx.sum(below, axis=-1, keepdims=True) - 1, 0)  # last below
        before = mx.where(mx.any(below, axis=-1, keepdims=True),
                          mx.take_along_axis(at, chosen, axis=-1), before)
        prefix = prefix | (chosen.astype(mx.int32) << shift)
    return mx.concatenate([prefix, last_tie(key, weights, target, prefix, before)], axis=1)


def last_tie(key: mx.array, weights: mx.array, target: mx.array, cut: mx.array,
             before: mx.array) -> mx.array:
    """[B, 1] int32: the index of the last id at the cut's key that top-p keeps. Ties
    (key == cut, one weight w) are kept in id order, as a stable sort by probability
    would keep them, while the mass before each (before + r x w for the r-th) is below
    target: the first n = ceil((target - before) / w) of them, at least 1, at most all.
    V - 1 where the cut has no ids."""
    at = key == cut                                                    # [B, V]
    m = at.astype(mx.int32).sum(axis=-1, keepdims=True)                # [B, 1]
    w = mx.max(mx.where(at, weights, 0.0), axis=-1, keepdims=True)     # [B, 1]
    x = (target - before) / mx.maximum(w, 1e-38)
    n = mx.where((w > 0) & (x < m), mx.maximum(mx.ceil(mx.minimum(x, 2.0 ** 30)), 1), m)
    rank = mx.cumsum(at.astype(mx.int32), axis=-1)                     # [B, V] inclusive
    nth = mx.argmax(at & (rank == n.astype(mx.int32)), axis=-1, keepdims=True)
    return mx.where(m > 0, nth, key.shape[1] - 1).astype(mx.int32)


def applies(key: mx.array, weights: mx.array, target: mx.array) -> bool:
    return (key.ndim == 2 and key.dtype == mx.int32 and weights.shape == key.shape
            and weights.dtype == mx.float32 and target.shape == (key.shape[0], 1)
            and target.dtype == mx.float32
            and 0 < key.shape[1] <= MAX_BLOCKS * SPAN)


def kernel(key: mx.array, weights: mx.array, target: mx.array, *, backend: str) -> mx.array:
    """Launch on `backend`: [B, 2] int32, as `reference`. CUDA: LAUNCHES launches of
    blocks_per_row(V) blocks a row (the stand-in counts as many). Metal: the cut in one
    threadgroup a row, the last tie by `last_tie`'s plain ops (not ported to Metal)."""
    rows = key.shape[0]
    if backend == "metal":
        cut, before = _METAL.get(backend)(
            inputs=[key, weights, target], grid=(rows * METAL_THREADS, 1, 1),
            threadgroup=(METAL_THREADS, 1, 1), output_shapes=[(rows, 1), (rows, 1)],
            output_dtypes=[mx.int32, mx.float32])
        return mx.concatenate([cut, last_tie(key, weights, target, cut, before)], axis=1)
    nb = blocks_per_row(key.shape[1])
    # pass 0 decides nothing: its inputs from a pass before are placeholders of their
    # dtypes (never read), so all 8 passes are one compiled kernel
    part, prefix, before = weights, key, target
    for p in range(len(PASSES)):
        part, prefix, before = _PASS.get(backend)(
            inputs=[key, weights, target, scalar(p, mx.int32), part, prefix, before],
            grid=(rows * nb * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
            output_shapes=[(rows, nb * 16), (rows, 1), (rows, 1)],
            output_dtypes=[mx.float32, mx.int32, mx.float32])
    cut, cut_before, ties, tie_w = _TIES.get(backend)(
        inputs=[key, weights, target, part, prefix, before],
        grid=(rows * nb * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
        output_shapes=[(rows, 1), (rows, 1), (rows, nb), (rows, nb)],
        output_dtypes=[mx.int32, mx.float32, mx.int32, mx.float32])
    (out,) = _LAST.get(backend)(
        inputs=[key, target, cut, cut_before, ties, tie_w], grid=(rows * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1), output_shapes=[(rows, 2)], output_dtypes=[mx.int32])
    return out

