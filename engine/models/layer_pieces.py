"""A forward's layers run in pieces: a layer range at a time, the hidden state carried.

Why: a prompt chunk of n tokens read beside decode rows costs its step about c + F + n p
(docs/ENGINE.md, "What the floor allows"). On a GPU F is large (each MoE layer reads
nearly every expert's weights once a chunk: on session 29's H100 a 128-token chunk cost
0.56 ms a token beside the streams against 0.34 read alone in 512-token chunks), and the
floor f caps each step, so short chunks pay F over few tokens. Run over k steps, a layer
range each, a chunk of k n tokens costs each step about c + (F + k n p) / k: the same
step length reads k times the tokens at a per-token cost nearer the alone one.
The step loop reads a chunk so with EngineConfig.chunk_pieces (engine/core/chunk_pieces.py);
`python -m engine.bench.mixed_step --pieces K` times such steps one by one.

A piece runs the layers [start, stop) on the Carry the piece before it left; the first
embeds the tokens, the last ends the forward as a whole one does (norm, head). Every
layer writes its own K/V pages or recurrent state when it runs, so the pieces of one
chunk, run in order, leave the cache and the logits a whole forward leaves.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

from kernels import pool_order


@dataclass
class Carry:
    """What a piece leaves the next: the hidden state [N, H] and the MLP output the next
    layer's input norm adds (elementwise.carried_norm; None where already added)."""
    h: mx.array
    pending: mx.array | None


def layer_bounds(num_layers: int, pieces: int) -> list[tuple[int, int]]:
    """`pieces` contiguous layer ranges [start, stop), as equal as whole layers allow,
    covering every layer once in order."""
    if not 1 <= pieces <= num_layers:
        raise ValueError(f"pieces must be 1..{num_layers} (the model's layers), not {pieces}")
    cuts = [round(i * num_layers / pieces) for i in range(pieces + 1)]
    return list(zip(cuts, cuts[1:]))


def span_of(layers: tuple[int, int] | None, num_layers: int,
            carry: Carry | None) -> tuple[int, int]:
    """The layer range a forward runs: all of them by default; a range starting past
    layer 0 needs the Carry of the piece before it, one starting at 0 none."""
    start, stop = layers if layers is not None else (0, num_layers)
    if not 0 <= start < stop <= num_layers:
        raise ValueError(f"layers {start}..{stop} are not a range of the model's "
                         f"{num_layers}")
    if (start > 0) != (carry is not None):
        raise ValueError("a piece after the first takes the Carry of the one before it, "
                         "the first none")
    return start, stop


def run_layers(layers: list, entries: list, rows, embed: Callable[[], mx.array],
               pools: list[list[mx.array]], span: tuple[int, int] | None = None,
               carry: Carry | None = None) -> mx.array | Carry:
    """A model's layers [start, stop) of `span` (all by default) over `rows` (RowGroups),
    each with its own cache lists (`entries`, in layer order): from the tokens' embedding
    (`embed()`) or the Carry the piece before left. -> the residual stream after the last
    layer, its pending MLP output added, or a piece's Carry. The pools the layers wrote in
    place (`pools`: the cache's lists) are ordered after it (kernels/pool_order.py)."""
    start, stop = span_of(span, len(layers), carry)
    h, pending = (embed(), None) if carry is None else (carry.h, carry.pending)   # [N, H]
    with pool_order.once(rows.single_decode) as order:
        for layer, entry in zip(layers[start:stop], entries[start:stop]):
            h, pending = layer(h, rows, entry, pending)
        out = Carry(h, pending) if stop < len(layers) else (
            h if pending is None else h + pending)
        order.settle(pools, out.h if isinstance(out, Carry) else out)
    return out
