"""CPU weight layout (engine/loading/cpu_layout.py): column-major layer weights and a
vocabulary head multiplied in blocks compute the model a float64 reference computes.

Tolerance: the same float32 argument as tests/engine/test_cpu_dense.py (dot products
of length <= 128 here round to ~1e-6 relative; a few layers stay under 1e-5 of the
logits' scale). A layout or block mistake (a transposed weight, a block out of
order, a missing tail block) moves logits by O(scale), far outside it.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from float64_llama import float64_logits
from tiny_models import tiny_llama, tiny_llama_config

from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.loading import cpu_layout
from engine.models.base import fuse_projections

pytestmark = pytest.mark.skipif(mx.default_device().type != mx.DeviceType.cpu,
                                reason="the layout applies to MLX's CPU backend")
# More rows than HEAD_ROWS and not a multiple of HEAD_BLOCK: blocks plus a short tail.
BIG_VOCAB = cpu_layout.HEAD_ROWS + 1000
PROMPT = [5, 17, 42, 99, 3, 250, 11, 64, 7, 9000, 31, 8500]


@pytest.mark.parametrize("rows", [1, 8, cpu_layout.BLOCKED_MAX_ROWS + 1])
def test_blocked_matmul_matches_float64(rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 1, 64)).astype(np.float32)             # [M, 1, in]
    w = rng.standard_normal((BIG_VOCAB, 64)).astype(np.float32)           # [out, in]
    got = np.array(cpu_layout.blocked_matmul(mx.array(x), mx.array(w)), np.float64)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    assert got.shape == (rows, 1, BIG_VOCAB)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def _arranged_model(tied: bool):
    config = tiny_llama_config(vocab_size=BIG_VOCAB, tie_word_embeddings=tied)
    model = tiny_llama(config)
    ref = float64_logits(model, PROMPT) if tied else None
    fuse_projections(model)
    assert cpu_layout.arrange(model) > 0
    return model, ref


def test_arranged_model_matches_float64_reference():
    model, ref = _arranged_model(tied=True)
    assert isinstance(model.model.embed_tokens, cpu_layout.BlockedHeadEmbedding)
    qkv = model.model.layers[0].self_attn.qkv_proj.joined.weight
    assert qkv.shape == (64 + 2 * 32, 64)            # still [out, in] to every reader
    # Decode-sized rows (each prompt's last token) and whole-prompt logits both agree.
    got = np.array(Runner(model, EngineConfig(num_pages=16)).full_logits(PROMPT), np.float64)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


def test_untied_head_is_blocked_and_keeps_its_bias():
    model, _ = _arranged_model(tied=False)
    head = model.lm_head
    assert isinstance(head, cpu_layout.BlockedHeadLinear)
    head.bias = mx.arange(BIG_VOCAB, dtype=mx.float32) * 1e-3
    x = mx.random.normal((8, 1, 64))
    want = np.array(x, np.float64) @ np.array(head.weight, np.float64).T \
        + np.array(head.bias, np.float64)
    assert np.abs(np.array(head(x), np.float64) - want).max() <= 1e-5 * np.abs(want).max()


def test_arrange_twice_changes_nothing_more():
    """A model handed to a second engine is arranged again: same arrays, same kinds."""
    model, _ = _arranged_model(tied=True)
    before = model.model.layers[0].mlp.down_proj.weight
    cpu_layout.arrange(model)
    assert model.model.layers[0].mlp.down_proj.weight is before or np.array_equal(
        np.array(model.model.layers[0].mlp.down_proj.weight), np.array(before))
    assert isinstance(model.model.embed_tokens, cpu_layout.BlockedHeadEmbedding)


def test_small_vocabulary_and_other_dtypes_are_left_alone():
    model = tiny_llama(tiny_llama_config())                # vocab 320: no blocked head
    model.model.layers[0].mlp.down_proj.weight = \
        model.model.layers[0].mlp.down_proj.weight.astype(mx.float16)
    cpu_layout.arrange(model)
    assert type(model.model.embed_tokens) is nn.Embedding
    assert model.model.layers[0].mlp.down_proj.weight.dtype == mx.float16


def test_layout_off_keeps_the_model_as_loaded(monkeypatch):
    monkeypatch.setenv(cpu_layout.ENV_VAR, "off")
    model = tiny_llama(tiny_llama_config(vocab_size=BIG_VOCAB))
    weight = model.model.layers[0].mlp.down_proj.weight
    assert cpu_layout.arrange(model) == 0
    assert type(model.model.embed_tokens) is nn.Embedding
    assert model.model.layers[0].mlp.down_proj.weight is weight
