"""engine/bench/synthetic_routing.py: the count of experts a decode step reads."""
import pytest

from engine.bench import synthetic_routing as sr
from engine.bench.synthetic import QWEN3_5_TOY
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


def test_the_hook_is_removed_after_counting():
    original = moe.SparseMoeBlock.__call__
    with sr.counted_routing(4):
        assert moe.SparseMoeBlock.__call__ is not original
    assert moe.SparseMoeBlock.__call__ is original
