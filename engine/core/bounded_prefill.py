"""A long prompt chunk on CUDA read in layer pieces, at most two of them on the device.

Why (issue 23, item 4: a 16,384-token prefill peaked 7.07 GB above the weights on the
H200, the paged pool ~0.40 GB of it): MLX 0.32's CUDA SDPA has no fused kernel for a head
dim above 128 (cuDNN's path takes at most 128, `supports_sdpa_cudnn`; the vector kernel is
for decode), so a prompt chunk's attention at Qwen3.5's 256 runs MLX's fallback, which
materialises the scores, the masked scores and the probabilities: 3 x heads x T x L
values a layer (0.81 GB for 512 tokens over 16,384 of context). And MLX's CUDA backend
holds every buffer a committed graph used until the GPU has finished it
(`gpu::eval` -> `add_temporary`, freed by the commit's completion handler), while its eval
runs up to 10 commits ahead of the GPU (~100 kernels or ~1,000 M input elements each):
one forward's attention layers end up resident together. Metal has a fused kernel for 256
(MLX's steel attention), and the CPU backend frees each op's inputs when the op has run.

So on CUDA, where a chunk's attention would materialise more than IN_FLIGHT_BYTES, the
chunk's forward is queued a layer range at a time (the pieces of
engine/models/layer_pieces.py, one attention layer each), and before queuing piece i+1
the engine thread waits for piece i-1: piece i keeps the GPU busy meanwhile, and at most
two pieces' buffers are held. The pieces leave the cache and logits the whole forward
leaves (tests/engine/test_bounded_prefill.py). A chunk read beside decode rows is already
read a piece a step (EngineConfig.chunk_pieces) and is not touched here.

Measured (an H100, session 44, `python3 -m engine.bench.prefill_memory --prompt 16384
--bounded on|off`): a 16,384-token prompt's peak 5.07 GB above the weights against 8.38
whole, its first token in 5.62-5.78 s against 6.07 (docs/PERFORMANCE.md).
"""
from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from engine.core import pool_scatters
from engine.models.layer_pieces import Carry, layer_bounds
from kernels.backend import gpu_backend

# MLX 0.32's CUDA SDPA: cuDNN's fused path takes head dims up to 128 (a multiple of 8).
CUDA_FUSED_HEAD_DIM_MAX = 128
# Queue whole above this much materialised attention a forward: 2 GiB.
IN_FLIGHT_BYTES = 2 << 30
SCORE_ARRAYS = 3     # the fallback's scores, masked scores and probabilities


def unfused_attention_bytes(model, tokens: int, context: int, backend: str | None) -> int:
    """Bytes a chunk forward of `tokens` queries over `context` keys materialises in its
    attention layers on `backend` (0 where the attention is fused or freed op by op)."""
    args = model.args
    if backend != "cuda" or args.head_dim <= CUDA_FUSED_HEAD_DIM_MAX:
        return 0
    spec = model.cache_spec()
    per_layer = SCORE_ARRAYS * args.num_attention_heads * tokens * context * spec.kv_dtype.size
    return spec.num_kv_layers * per_layer


def pieces_for(model, tokens: int, context: int, backend: str | None = None,
               limit: int = IN_FLIGHT_BYTES) -> int:
    """How many layer pieces a chunk forward is queued in: 1 (whole) unless its attention
    would materialise more than `limit`, then one piece an attention layer (at most one
    a layer). backend: 'cuda', 'metal', 'cpu' (or any other: no GPU); gpu_backend()
    when None."""
    backend = gpu_backend() if backend is None else backend
    if unfused_attention_bytes(model, tokens, context, backend) <= limit:
        return 1
    return min(model.cache_spec().num_kv_layers, len(model.layers))


def queue_in_pieces(piece: Callable[[tuple[int, int], Carry | None], Carry | mx.array],
                    num_layers: int, pieces: int,
                    cache_arrays: Callable[[], list[mx.array]]) -> mx.array:
    """A chunk forward queued `pieces` layer ranges at a time, at most two on the device.
    piece(span, carry): the runner's prefill_piece for that chunk (its Carry, or after
    the last layer each row's last-token logits [B, V]); cache_arrays(): the pools the
    pieces write in place. -> the logits (lazy, as Runner.prefill returns them)."""
    out, behind = None, None
    for span in layer_bounds(num_layers, pieces):
        out = piece(span, out)
        # A piece's K/V scatters wait for earlier readers of their pools only before the
        # first piece: the later ones write other layers' pools, which no piece before reads.
        if behind is not None:
            pool_scatters.take()
        if not isinstance(out, Carry):
            return out
        # The pools the piece wrote in place go with it (the step loop's pieces do alike).
        pool_scatters.queue([a for a in (out.h, out.pending) if a is not None], cache_arrays())
        if behind is not None:
            mx.eval(behind)      # the piece before this one has finished: its buffers go
        behind = out.h
    raise AssertionError("the last piece returns the logits")
