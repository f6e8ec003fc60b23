"""A prefill chunk's graph does not grow with its length: no per-token host loop."""
from __future__ import annotations

import importlib
import io

import mlx.core as mx
import pytest
from qwen_fixtures import Rows, build_model, random_weights, tiny_config

LENGTHS = (64, 128, 256, 512)


def count_ops(*outputs: mx.array) -> int:
    """Primitive nodes (rectangles) in the DOT export of everything the outputs depend on."""
    dot = io.StringIO()
    mx.export_to_dot(dot, *outputs)
    return dot.getvalue().count("shape=rectangle")


def ops_for_chunk(model, T: int) -> int:
    """Ops of one ragged 2-row prefill chunk (lengths T and T-3), logits and cache writes."""
    rows = Rows(model, page_size=16, num_pages=2 * T // 16 + 4)
    rows.start(0)
    rows.start(1)
    lengths = [T, T - 3]
    for s, n in zip((0, 1), lengths):
        rows._grow(s, n)
    view = rows.view([0, 1], lengths, T, all_logits=False)
    tokens = mx.zeros((2, T), dtype=mx.int32)
    logits = model(tokens, view, rows.cache)
    return count_ops(logits, *rows.cache.arrays())


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_5", "qwen3_next"])
def test_ops_per_chunk_do_not_grow_with_length(model_type):
    config = tiny_config(model_type)
    model = build_model(config, random_weights(config))
    counts = [ops_for_chunk(model, T) for T in LENGTHS]
    assert counts[0] > 100                     # the counter sees the whole forward
    assert len(set(counts)) == 1, dict(zip(LENGTHS, counts))


def test_the_counter_sees_a_per_token_loop():
    """mlx-lm's CPU fallback loops over tokens in Python: the same counter must see it grow."""
    lm = pytest.importorskip("mlx_lm")
    config = tiny_config("qwen3_5_moe")
    module = importlib.import_module("mlx_lm.models.qwen3_5_moe")
    ref = module.Model(module.ModelArgs.from_dict(config))
    ref.load_weights(list(random_weights(config).items()), strict=True)
    assert lm is not None
    counts = [count_ops(ref(mx.zeros((1, T), dtype=mx.int32))) for T in (64, 128)]
    assert counts[1] > counts[0] + 64
