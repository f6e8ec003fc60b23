"""Projections joined at load: the same logits, the same weights back, fewer operations."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from float32_tolerance import assert_close, model_depth
from mlx.utils import tree_flatten
from qwen_fixtures import Rows, build_model, random_weights, tiny_config
from tiny_models import tiny_llama

from engine.bench.profile_ops import count_ops
from engine.loading import cuda_qmm_guard
from engine.models.fused import FusedLinear, unfused_parameters
from engine.models.qwen3_5 import quantize_predicate

PROMPT = [5, 17, 200, 3, 99, 42, 7]


def _decode_ops(model) -> int:
    rows = Rows(model)
    rows.start(0)
    mx.eval(rows.forward({0: PROMPT}))
    rows._grow(0, len(PROMPT) + 1)
    view = rows.view([0], [1], 1, all_logits=False)
    logits = model(mx.array([[3]]), view, rows.cache)
    return count_ops(logits, *rows.cache.arrays())     # the op counter's rule: no views


def _same(a: Rows, b: Rows, tokens: list[int]) -> None:
    """Joined and separate projections are different GEMM shapes: float32 apart."""
    assert_close(b.forward({0: tokens}), a.forward({0: tokens}),
                 model_depth(a.model, len(PROMPT) + 2))


def _pair(model_type: str, quantize: bool):
    config = tiny_config(model_type)
    weights = random_weights(config, seed=4)
    plain, fused = build_model(config, weights), build_model(config, weights)
    if quantize:
        for m in (plain, fused):
            nn.quantize(m, group_size=64, bits=4, class_predicate=quantize_predicate)
    fused.fuse_projections()
    return _as_loaded(plain), _as_loaded(fused)


def _as_loaded(model):
    """As load leaves a model after joining (engine/loading/model_bundle.py): on MLX's
    CUDA backend, the tiny models' quantized layers with one group along K (hidden 64,
    group 64) dense, since MLX multiplies those wrongly there; elsewhere unchanged."""
    cuda_qmm_guard.apply(model)
    return model


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_5", "qwen3_next"])
def test_fused_model_gives_the_same_logits_and_weights(model_type, quantize):
    plain, fused = _pair(model_type, quantize)
    assert any(isinstance(m, FusedLinear) for _, m in fused.named_modules())
    a, b = Rows(plain), Rows(fused)
    a.start(0)
    b.start(0)
    for tokens in (PROMPT, [3], [250]):
        _same(a, b, tokens)
    original = dict(tree_flatten(plain.parameters()))
    back = dict(unfused_parameters(fused))
    assert set(back) == set(original)
    assert all(mx.array_equal(back[k], original[k]).item() for k in original)


def test_fusion_saves_the_launches_it_claims():
    """Tiny Qwen3.5 MoE, 2 Gated DeltaNet + 2 attention layers, MoE everywhere: 4 -> 1
    input projections (3 each), q/k/v -> 1 (2 each), the shared expert's gate+up (1 each),
    the routed experts' gate+up (1 each: a gathered matmul), the router with the shared
    expert's gate (1 each)."""
    plain, fused = _pair("qwen3_5_moe", quantize=True)
    assert _decode_ops(plain) - _decode_ops(fused) == 2 * 3 + 2 * 2 + 4 * 1 + 4 * 2


def test_layers_quantized_differently_stay_apart():
    config = tiny_config("qwen3_5_moe")
    plain = build_model(config, random_weights(config, seed=5))
    fused = build_model(config, random_weights(config, seed=5))

    def mixed(path, module):                 # in_proj_a at 8 bits, the rest at 4
        if not quantize_predicate(path, module):
            return False
        return {"group_size": 64, "bits": 8} if path.endswith("in_proj_a") else True
    for m in (plain, fused):
        nn.quantize(m, group_size=64, bits=4, class_predicate=mixed)
    fused.fuse_projections()
    attn = fused.layers[0].linear_attn
    assert "in_proj" not in attn and "in_proj_a" in attn
    a, b = Rows(_as_loaded(plain)), Rows(_as_loaded(fused))
    a.start(0)
    b.start(0)
    _same(a, b, PROMPT)


@pytest.mark.parametrize("quantize", [False, True])
def test_fused_llama_gives_the_same_logits_and_saves_three_ops_a_layer(quantize):
    plain, fused = tiny_llama(seed=6), tiny_llama(seed=6)
    if quantize:
        for m in (plain, fused):
            nn.quantize(m, group_size=32, bits=4)
    before = _decode_ops(plain)
    fused.fuse_projections()
    assert before - _decode_ops(fused) == 3 * 2       # q/k/v -> 1, gate/up -> 1; 2 layers
    a, b = Rows(plain), Rows(fused)
    a.start(0)
    b.start(0)
    for tokens in (PROMPT, [3]):
        _same(a, b, tokens)
    original = dict(tree_flatten(plain.parameters()))
    back = dict(unfused_parameters(fused))
    assert set(back) == set(original)


def test_the_bench_peer_gets_the_loaded_tree_of_a_joined_model():
    """mlx-lm, built from a joined model (as the bench does), quantized and named as
    loaded: its logits equal ours."""
    pytest.importorskip("mlx_lm", reason="mlx-lm is the bench's peer")
    from engine.bench.peer import peer_model
    plain, fused = _pair("qwen3_5_moe", quantize=True)
    peer = peer_model(fused, tiny_config("qwen3_5_moe"))
    rows = Rows(plain)
    rows.start(0)
    ours = rows.forward({0: PROMPT})
    assert_close(peer(mx.array([PROMPT]))[:, -1:], ours, model_depth(plain, len(PROMPT)))


def test_joining_twice_changes_nothing():
    plain, fused = _pair("qwen3_5", quantize=False)
    fused.fuse_projections()                  # a model handed to a second engine
    a, b = Rows(plain), Rows(fused)
    a.start(0)
    b.start(0)
    _same(a, b, PROMPT)


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_5"])
def test_rows_padded_for_the_gpu_change_no_logit_and_no_weight(monkeypatch, model_type,
                                                               quantize):
    """On a GPU a joined output is padded with zero rows to a multiple of 128 (MLX CUDA's
    tiled qmm); the pad is dropped from the output and from the unfused tree."""
    import engine.models.fused as fused_module
    monkeypatch.setattr(fused_module, "row_multiple", lambda: 128)
    plain, fused = _pair(model_type, quantize)
    joined = [m for _, m in fused.named_modules() if isinstance(m, FusedLinear)]
    assert any(m.parts.pad for m in joined)
    for m in joined:
        width = m.joined.weight.shape[-2]
        assert width % 128 == 0 and width == sum(m.parts.sizes) + m.parts.pad
    a, b = Rows(plain), Rows(fused)
    a.start(0)
    b.start(0)
    for tokens in (PROMPT, [3], [250]):
        _same(a, b, tokens)
    original = dict(tree_flatten(plain.parameters()))
    back = dict(unfused_parameters(fused))
    assert set(back) == set(original)
    assert all(mx.array_equal(back[k], original[k]).item() for k in original)
