"""A long prompt chunk on CUDA queued in layer pieces, at most two on the device
(engine/core/bounded_prefill.py): when it applies, what the queue looks like, and that
the split forward leaves the replies, logits and kept state the whole one leaves."""
from __future__ import annotations

from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest
from engine_harness import Harness
from float32_tolerance import assert_close, model_depth
from tiny_models import tiny_model

import engine.core.bounded_prefill as bounded
import engine.core.runner as runner_module
from engine.events import FinishedEvent
from engine.models.base import CacheSpec
from engine.models.layer_pieces import Carry, layer_bounds


def _model_like(head_dim: int = 256, heads: int = 16, layers: int = 40, kv_layers: int = 10):
    """What pieces_for reads of a model, in Qwen3.5-35B-A3B's attention geometry."""
    spec = CacheSpec(num_kv_layers=kv_layers, num_kv_heads=2, head_dim=head_dim,
                     kv_dtype=mx.bfloat16)
    return SimpleNamespace(args=SimpleNamespace(head_dim=head_dim, num_attention_heads=heads),
                           cache_spec=lambda: spec, layers=[None] * layers)


def test_a_long_chunk_on_cuda_is_queued_one_attention_layer_a_piece():
    model = _model_like()
    # 512 tokens over 16,384 of context: 10 layers x 3 x 16 x 512 x 16,384 x 2 B = 8.05 GB
    assert bounded.unfused_attention_bytes(model, 512, 16384, "cuda") == 8_053_063_680
    assert bounded.pieces_for(model, 512, 16384, "cuda") == 10
    # each of layer_bounds(40, 10)'s ranges holds one of the layers 3, 7, ..., 39
    assert all(sum(i % 4 == 3 for i in range(a, b)) == 1 for a, b in layer_bounds(40, 10))
    # 512 over 2,048: 1.0 GB, whole
    assert bounded.pieces_for(model, 512, 2048, "cuda") == 1


@pytest.mark.parametrize("backend,head_dim", [("metal", 256), ("cpu", 256), ("cuda", 128)])
def test_fused_or_op_by_op_attention_is_queued_whole(backend, head_dim):
    """Metal has a fused kernel for 256, the CPU frees each op's inputs as it runs, and
    MLX's CUDA SDPA fuses head dims up to 128. (The CPU is named, not None: None asks
    gpu_backend(), which is 'cuda' on a GPU machine; session 45's H100 run failed so.)"""
    model = _model_like(head_dim=head_dim)
    assert bounded.unfused_attention_bytes(model, 512, 16384, backend) == 0
    assert bounded.pieces_for(model, 512, 16384, backend) == 1


def test_at_most_two_pieces_are_on_the_device(monkeypatch):
    """Piece i is queued before the engine waits for piece i-1, never for piece i."""
    log = []
    monkeypatch.setattr(bounded.mx, "async_eval", lambda *a: log.append(("queue", a[0][0])))
    monkeypatch.setattr(bounded.mx, "eval", lambda x: log.append(("wait", x)))

    def piece(span, carry):
        assert (carry is None) == (span[0] == 0)
        return "logits" if span[1] == 8 else Carry(h=f"h{span[1]}", pending=None)

    assert bounded.queue_in_pieces(piece, 8, 4, lambda: []) == "logits"
    assert log == [("queue", "h2"), ("queue", "h4"), ("wait", "h2"), ("queue", "h6"),
                   ("wait", "h4")]


PROMPT = np.random.default_rng(7).integers(0, 320, 21).tolist()   # three chunks of 8
NEXT_TURN = PROMPT + [5, 9, 11, 2]


def _run(model, pieces: int, monkeypatch) -> Harness:
    """One prompt read alone, then its next turn (from the first turn's kept state)."""
    monkeypatch.setattr(runner_module, "pieces_for", lambda *a, **k: pieces)
    calls = []
    queue = bounded.queue_in_pieces
    monkeypatch.setattr(runner_module, "queue_in_pieces",
                        lambda *a: calls.append(a[2]) or queue(*a))
    h = Harness(model, max_num_seqs=2, prefill_chunk=8, fixed_shapes=True,
                pipeline_steps=True).run({0: [(0, PROMPT, 6)], 12: [(1, NEXT_TURN, 4)]})
    assert calls == ([pieces] * len(calls) if pieces > 1 else []) and (pieces == 1 or calls)
    return h


@pytest.mark.parametrize("kind", ["qwen3_5_moe", "llama"])
def test_a_chunk_queued_in_pieces_leaves_what_the_whole_forward_leaves(kind, monkeypatch):
    model = tiny_model(kind, qwen_seed=4, llama_layers=4)
    whole = _run(model, 1, monkeypatch)
    split = _run(model, 4, monkeypatch)
    replies = {e.request_id: e.token_ids for e in whole.events if isinstance(e, FinishedEvent)}
    assert len(replies) == 2
    assert {e.request_id: e.token_ids for e in split.events
            if isinstance(e, FinishedEvent)} == replies
    depth = model_depth(model, len(NEXT_TURN) + 4)
    for rid, rows in whole.logits.items():
        assert len(split.logits[rid]) == len(rows), rid
        for a, b in zip(split.logits[rid], rows):
            assert_close(a, b, depth, f"request {rid}")
