"""Dense float32 weights on the CPU (engine/loading/cpu_dense.py): the rule, and that the
dense path computes the same model as the quantized one.

Tolerance, justified by a float64 reference: both paths compute the *same* real
model (the quantized integers times their scales plus biases), only their rounding
differs. tests/engine/float64_llama.py runs that model in float64 numpy, unpacking
the integers itself. Float32 dot products of length K <= 1536 round to about
sqrt(K) * 6e-8 ~ 2e-6 relative per matmul; through a few layers that stays under
1e-5 of the logits' scale, so the dense path must be within 1e-5 * max|logit| of
float64 (measured on the built-in model's first 4 layers: 1e-6; dequantizing in the
scales' float16 instead gives 7e-4 and fails). MLX's quantized CPU matmul is less
exact (5e-4 relative there), so the dense and quantized logits may differ by the
sum of the two paths' measured float64 errors, and no more.
"""
from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest
from float64_llama import float64_logits
from tiny_models import write_tiny_llama

from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.loading import cpu_dense
from engine.loading.loader import load_model

pytestmark = pytest.mark.skipif(mx.default_device().type != mx.DeviceType.cpu,
                                reason="the dense rule applies to MLX's CPU backend")
PROMPT = [5, 17, 42, 99, 3, 250, 11, 64, 7, 128, 31, 200]


def _logits(model, ids) -> np.ndarray:
    return np.array(Runner(model, EngineConfig(num_pages=16)).full_logits(ids), np.float64)


def _check_against_float64(dense, quantized, ids) -> None:
    ref = float64_logits(quantized, ids)
    q_err = np.abs(_logits(quantized, ids) - ref).max()
    d_err = np.abs(_logits(dense, ids) - ref).max()
    scale = np.abs(ref).max()
    assert d_err <= 1e-5 * scale, (d_err, scale)
    assert q_err <= 1e-3 * scale, (q_err, scale)   # the reference is the same model
    diff = np.abs(_logits(dense, ids) - _logits(quantized, ids)).max()
    assert diff <= q_err + d_err + 1e-6 * scale


def test_tiny_model_dense_matches_float64_reference(tmp_path):
    folder = write_tiny_llama(tmp_path / "m", quantized=True)
    dense = load_model(folder, cpu_weights="dense")
    quantized = load_model(folder, cpu_weights="quantized")
    assert dense.weights.mode == "dense" and quantized.weights.mode == "quantized"
    assert not cpu_dense._quantized_modules(dense.model)
    assert cpu_dense._quantized_modules(quantized.model)
    _check_against_float64(dense.model, quantized.model, PROMPT)


def _first_layers(model, n: int):
    model.model.layers = model.model.layers[:n]
    model.args = dataclasses.replace(model.args, num_hidden_layers=n)
    return model


def test_builtin_model_dense_matches_float64_reference():
    from engine.errors import DefaultModelMissingError
    from engine.loading.default_model import default_model_path
    try:
        path = default_model_path()
    except DefaultModelMissingError:
        pytest.skip("the built-in model is not installed")
    dense = _first_layers(load_model(path, cpu_weights="dense").model, 4)
    quantized = _first_layers(load_model(path, cpu_weights="quantized").model, 4)
    _check_against_float64(dense, quantized, [1, 504, 3458, 282, 4649, 314, 28, 9])


def test_rule_dense_when_a_quarter_of_ram_holds_it(tmp_path):
    model = load_model(write_tiny_llama(tmp_path / "m", quantized=True),
                       cpu_weights="quantized").model
    need = cpu_dense.dense_bytes(model)
    # every weight float32: 2 layers of q,k,v,o,gate,up,down + embedding + 5 norms
    params = 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64) + 320 * 64 + 64
    assert need == params * 4
    assert cpu_dense.choose(model, memory_bytes=4 * need).mode == "dense"
    assert cpu_dense.choose(model, memory_bytes=4 * need - 4).mode == "quantized"
    assert cpu_dense.choose(model, "dense", memory_bytes=1).mode == "dense"
    assert "0.25 x RAM" in cpu_dense.choose(model, memory_bytes=4 * need).reason


def test_setting_is_validated():
    with pytest.raises(ValueError, match="cpu_weights"):
        EngineConfig(cpu_weights="fast")
    with pytest.raises(ValueError, match="cpu_weights"):
        cpu_dense.choose(object(), "fast")


def test_float_model_is_left_as_loaded(tmp_path):
    loaded = load_model(write_tiny_llama(tmp_path / "f"), cpu_weights="dense")
    assert loaded.weights.mode == "as loaded"
