"""engine/bench/synthetic_routing.py: the count of experts a decode step reads."""
import statistics

import mlx.core as mx
import pytest

from engine.bench import synthetic_routing as sr
from engine.bench.synthetic import QWEN3_5_TOY, synthetic_model_from_config
from engine.models import moe


def test_the_uniform_expectation_is_the_inclusion_count():
    assert sr.uniform_expectation(256, 8, 1) == pytest.approx(8)
    assert sr.uniform_expectation(256, 8, 32) == pytest.approx(163.3, abs=0.1)
    assert sr.uniform_expectation(16, 4, 10_000) == pytest.approx(16)


def test_each_decode_layer_counts_between_top_k_and_what_the_rows_can_pick():
    text = QWEN3_5_TOY["text_config"]
    batch, steps = 6, 8
    out = sr.measure(QWEN3_5_TOY, batch, steps)
    assert set(out) == set(sr.SETTINGS)
    top_k, num_experts = text["num_experts_per_tok"], text["num_experts"]
    for experts, tokens in out.values():
        assert len(experts) == (steps // 2) * text["num_hidden_layers"]
        assert all(top_k <= n <= min(num_experts, batch * top_k) for n in experts)
        assert len(tokens) == steps - steps // 2 and all(1 <= t <= batch for t in tokens)


def test_the_synthetic_rows_route_like_independent_ones_not_onto_the_same_experts():
    """The regression this guards: quantized weights with a common offset made every token
    alike by the first router (greedy B=6 on the toy: all rows one token, 6 of 16 experts
    a layer against 13.2 for independent rows; 163 expected at B=32 on the full layout,
    8 measured)."""
    text = QWEN3_5_TOY["text_config"]
    batch = 6
    uniform = sr.uniform_expectation(text["num_experts"], text["num_experts_per_tok"], batch)
    for experts, tokens in sr.measure(QWEN3_5_TOY, batch, 8).values():
        assert statistics.median(experts) >= 0.75 * uniform
        assert statistics.median(tokens) > batch // 2


def test_every_quantized_synthetic_weight_has_a_zero_mean_code_offset():
    """bias = -scale * (2^bits - 1) / 2 in every quantized module (the 8-bit routers too),
    so a uniform random code dequantizes to zero-mean weights."""
    model = synthetic_model_from_config(QWEN3_5_TOY)
    quantized = [m for _, m in model.named_modules() if getattr(m, "bits", None)]
    assert {m.bits for m in quantized} == {4, 8}
    for m in quantized:
        expected = m.scales.astype(mx.float32) * -((2 ** m.bits - 1) / 2)
        # rtol: the bf16 bias is the float32 product rounded, half an ulp (<= 2^-8) off
        assert mx.allclose(m.biases.astype(mx.float32), expected, rtol=2 ** -8, atol=0).item()


def test_the_hook_is_removed_after_counting():
    original = moe.SparseMoeBlock.__call__
    with sr.counted_routing(4):
        assert moe.SparseMoeBlock.__call__ is not original
    assert moe.SparseMoeBlock.__call__ is original
