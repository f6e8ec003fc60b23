"""The shared float32 tolerance passes rounding and catches a planted difference."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from float32_tolerance import assert_close, excess, is_close, model_depth, rounding_spread
from mlx.utils import tree_flatten
from qwen_fixtures import Rows, build_model, random_weights, tiny_config

PROMPT = np.random.default_rng(7).integers(0, 320, 34).tolist()


def test_sums_in_another_order_pass_and_a_planted_error_does_not():
    """64 sums of 4096 float32 products (scaled as a normalised activation's, sums O(1))
    summed three ways (numpy's pairwise, a running sum, backwards): rounding only,
    inside the bound; 1e-2 added to one sum is far outside."""
    rng = np.random.default_rng(0)
    terms = (rng.standard_normal((64, 4096)) / 64).astype(np.float32)
    exact = terms.astype(np.float64).sum(-1, keepdims=True)
    pairwise = terms.sum(-1, keepdims=True)
    running = np.cumsum(terms, axis=-1, dtype=np.float32)[:, -1:]
    backwards = np.cumsum(terms[:, ::-1], axis=-1, dtype=np.float32)[:, -1:]
    for got in (pairwise, running, backwards):
        assert_close(got.T, exact.T, depth=4096)
        assert_close(got.T, running.T, depth=4096)
    planted = running.copy()
    planted[5] += 1e-2
    assert excess(planted.T, exact.T, depth=4096) > 10


@pytest.fixture(scope="module")
def model():
    config = tiny_config("qwen3_5_moe")
    return build_model(config, random_weights(config, seed=3))


def _one_shot(model) -> mx.array:
    rows = Rows(model)
    rows.start(0)
    return rows.forward({0: PROMPT}, all_logits=True)               # [1, 34, V]


def _chunked(model, chunk: int) -> mx.array:
    rows = Rows(model)
    rows.start(0)
    return mx.concatenate([rows.forward({0: PROMPT[i:i + chunk]}, all_logits=True)
                           for i in range(0, len(PROMPT), chunk)], axis=1)


def test_a_chunked_prefill_passes_and_a_planted_logit_error_is_caught(model):
    """Rounding passes with and without the measured spread; 1e-2 on one logit of one
    row fails, and so does a prompt read one position off."""
    ref, got = _one_shot(model), _chunked(model, 5)
    depth = model_depth(model, len(PROMPT))
    spread = rounding_spread(model, lambda: _one_shot(model))
    assert is_close(got, ref, depth, spread)
    planted = np.array(got)
    planted[0, 20, 7] += 1e-2
    assert excess(planted, ref, depth) > 3
    assert not is_close(planted, ref, depth, spread)
    shifted = mx.concatenate([got[:, :1], got[:, :-1]], axis=1)     # off by one position
    assert excess(shifted, ref, depth, spread) > 100
    with pytest.raises(AssertionError, match="float32 tolerance"):
        assert_close(planted, ref, depth, "planted", spread)


def test_the_spread_restores_every_weight_bit_for_bit(model):
    before = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    spread = rounding_spread(model, lambda: _one_shot(model))
    assert spread.shape == (1, len(PROMPT), 320) and 0 < spread.max() < 1e-1
    for k, v in tree_flatten(model.parameters()):
        np.testing.assert_array_equal(np.array(v), before[k])
