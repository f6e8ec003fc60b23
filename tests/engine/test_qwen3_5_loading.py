"""A tiny model written in each shipped folder layout loads to the same logits."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import (
    Rows,
    build_model,
    random_weights,
    tiny_config,
    write_hf_folder,
    write_mlx_folder,
)

from engine.loading import cuda_qmm_guard
from engine.loading.loader import load_model

PROMPT = [3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64, 33]
MODEL_TYPES = ["qwen3_5_moe", "qwen3_5", "qwen3_next"]


def loaded(path, **kwargs) -> nn.Module:
    # These tests check the quantization the loader builds; on the CPU, dense weights
    # (engine/loading/cpu_dense.py) would replace it, so they keep it quantized.
    out = load_model(path, cpu_weights="quantized", **kwargs)
    return out.model if hasattr(out, "model") else out[0]


def _as_the_engine_runs_it(model: nn.Module) -> nn.Module:
    """On MLX's CUDA backend, a layer with one quantization group along K (all of these
    tiny models' K=64 projections) becomes its dense twin, as every engine load does
    (engine/loading/cuda_qmm_guard.py: MLX's CUDA kernel returns garbage there; session
    48's H100 gave NaN logits without it). Elsewhere nothing changes. In place: a test
    checks the loaded layers' quantization before it runs a model."""
    cuda_qmm_guard.apply(model)
    return model


def run(model: nn.Module, steps: int = 4) -> mx.array:
    """Prompt logits, then greedy decode steps: [1 + steps, V] float32."""
    rows = Rows(_as_the_engine_runs_it(model))
    rows.start(0)
    out = [rows.forward({0: PROMPT})]
    for _ in range(steps):
        out.append(rows.forward({0: [int(mx.argmax(out[-1][0, -1]).item())]}))
    return mx.concatenate(out, axis=1)[0].astype(mx.float32)


def assert_same(a: mx.array, b: mx.array, tol: float = 0.0):
    """The same computation on the same weights, however they were stored: bit for bit."""
    err = float(mx.abs(a - b).max())
    assert err <= tol, f"max |a - b| = {err}"


@pytest.fixture(params=MODEL_TYPES)
def tiny(request, tmp_path):
    config = tiny_config(request.param)
    return config, random_weights(config, seed=5, bf16_exact=True), tmp_path


def test_hf_bf16_folder_loads_to_our_model(tiny):
    """Names, conv layout, (w - 1) norms and expert stacking all undone by sanitize."""
    config, weights, tmp = tiny
    ours = build_model(config, {k: v if k.endswith("A_log") else v.astype(mx.bfloat16)
                                for k, v in weights.items()})
    for fused in ([False, True] if "num_experts" in str(config) else [False]):
        folder = write_hf_folder(tmp / f"hf_{fused}", config, weights, fused=fused)
        assert_same(run(loaded(folder)), run(ours), tol=0.0)


def test_mlx_4bit_folder_equals_hf_folder_quantized_on_load(tiny):
    config, weights, tmp = tiny
    mlx_model = loaded(write_mlx_folder(tmp / "mlx", config, weights))
    hf_model = loaded(write_hf_folder(tmp / "hf", config, weights), quantize_bits=4)
    layer = mlx_model.layers[0]
    assert isinstance(layer.linear_attn.in_proj_qkv if hasattr(layer.linear_attn, "in_proj_qkv")
                      else layer.linear_attn.in_proj_qkvz, nn.QuantizedLinear)
    if config["model_type"] != "qwen3_5":
        assert layer.mlp.gate.bits == 8 and layer.mlp.switch_mlp.up_proj.bits == 4
    assert_same(run(mlx_model), run(hf_model), tol=0.0)


def test_mlx_folder_equals_mlx_lm_loading_it(tiny):
    """The folder we write is a real MLX folder: mlx-lm loads it to the same logits."""
    utils = pytest.importorskip("mlx_lm.utils", reason="mlx-lm is the reference implementation")
    config, weights, tmp = tiny
    folder = write_mlx_folder(tmp / "mlx", config, weights)
    ref, _ = utils.load_model(folder)
    ours = loaded(folder)
    for m in (ref, ours):   # same packed weights; float32 scales and activations
        m.set_dtype(mx.float32)
    _as_the_engine_runs_it(ref)     # after set_dtype, as `run` does ours: float32 twins
    ref_logits = ref(mx.array([PROMPT]))[:, -1]
    assert_close(run(ours, steps=0), ref_logits, model_depth(ours, len(PROMPT)), "ours vs mlx-lm")


def test_folders_ship_a_working_tokenizer(tiny):
    from tokenizers import Tokenizer
    config, weights, tmp = tiny
    folder = write_mlx_folder(tmp / "mlx", config, weights)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = tok.encode("hello quick fox").ids
    assert max(ids) < config.get("text_config", config)["vocab_size"]
    assert tok.decode(ids) == "hello quick fox"
