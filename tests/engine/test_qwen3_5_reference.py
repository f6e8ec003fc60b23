"""Our Qwen3.5 / Qwen3-Next logits equal mlx-lm's on the same weights (prompt + 16 decode steps)."""
from __future__ import annotations

import importlib

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from float32_tolerance import assert_close, is_close, model_depth
from qwen_fixtures import Rows, build_model, random_weights, tiny_config

from engine.loading import cuda_qmm_guard
from engine.models.qwen3_5 import ModelArgs, quantize_predicate

pytest.importorskip("mlx_lm", reason="mlx-lm is the reference implementation")

PROMPT = [5, 17, 200, 3, 99, 42, 7, 250, 11, 64, 128, 31, 2]


def depth(config: dict) -> int:
    """The float32 rounding depth of the prompt and 16 decode steps."""
    return model_depth(ModelArgs.from_config(config), len(PROMPT) + 16)


def reference_model(config: dict, weights: dict):
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    ref = module.Model(module.ModelArgs.from_dict(config))
    ref.load_weights(list(weights.items()), strict=True)
    mx.eval(ref.parameters())
    return ref


def greedy_pair(config: dict, weights: dict, quantize: bool = False, fused: bool = False):
    """Run ours and mlx-lm side by side, feeding both the same greedy tokens. fused: ours
    with its projections joined after loading, as the engine runs it."""
    ours, ref = build_model(config, weights), reference_model(config, weights)
    if quantize:
        for m in (ours, ref):
            nn.quantize(m, group_size=64, bits=4, class_predicate=quantize_predicate)
    if fused:
        ours.fuse_projections()
    # On MLX's CUDA backend the K=64 layers (one group of 64) become dense twins in
    # both, as an engine load does (engine/loading/cuda_qmm_guard.py); elsewhere a no-op.
    for m in (ours, ref):
        cuda_qmm_guard.apply(m)
    rows = Rows(ours)
    rows.start(0)
    ref_cache = ref.make_cache()
    pairs = [(rows.forward({0: PROMPT}), ref(mx.array([PROMPT]), cache=ref_cache)[:, -1:])]
    for _ in range(16):
        token = int(mx.argmax(pairs[-1][1][0, -1]).item())
        pairs.append((rows.forward({0: [token]}), ref(mx.array([[token]]), cache=ref_cache)))
    return pairs


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_5", "qwen3_next"])
def test_logits_match_mlx_lm(model_type, fused):
    config = tiny_config(model_type)
    pairs = greedy_pair(config, random_weights(config, seed=1), fused=fused)
    for step, (ours, ref) in enumerate(pairs):
        assert ours.shape == ref.shape == (1, 1, 320)
        assert_close(ours, ref, depth(config), f"step {step}, ours against mlx-lm")
    # The comparison is not vacuous: logits vary across steps.
    assert float(mx.abs(pairs[0][0] - pairs[-1][0]).max()) > 1e-2


@pytest.mark.parametrize("fused", [False, True])
def test_quantized_moe_matches_mlx_lm(fused):
    """gather_qmm experts (and 8-bit router gates) agree with mlx-lm's quantized path."""
    config = tiny_config("qwen3_5_moe")
    pairs = greedy_pair(config, random_weights(config, 2), True, fused)
    for step, (ours, ref) in enumerate(pairs):
        assert_close(ours, ref, depth(config), f"step {step}, ours against mlx-lm")


def test_comparison_catches_a_planted_error():
    config = tiny_config("qwen3_5_moe")
    weights = random_weights(config, seed=1)
    key = "language_model.model.layers.0.linear_attn.dt_bias"
    planted = dict(weights)
    planted[key] = weights[key] + mx.array(np.eye(4, dtype=np.float32)[0])
    ours = build_model(config, planted)
    ref = reference_model(config, weights)
    rows = Rows(ours)
    rows.start(0)
    got, want = rows.forward({0: PROMPT}), ref(mx.array([PROMPT]))[:, -1:]
    assert not is_close(got, want, depth(config))
