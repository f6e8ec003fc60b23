"""Every kernel the tiny Qwen hybrids reach, inside the engine's Runner, against the plain
path: decode steps with padding rows (fixed shapes), plain and through mx.compile.

On a GPU the kernel set is the real one (every kernel launching, the pools written in
place); anywhere, a set made of the kernels' float32 references (each test module's
contract class, rows scattered) checks the same wiring. moe_experts needs 4-bit experts,
which these float models do not have (tests/kernels/test_moe_experts.py covers it)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import build_model, random_weights, tiny_config
from test_add_rms_norm import _AddNormByReference
from test_attention_prep import _AttentionByReference
from test_gated_delta_step import _StepByReference
from test_gated_delta_step_norm import _StepNormByReference
from test_gated_rms_norm import _GatedNormByReference
from test_gdn_conv_chunk import _ChunkConvByReference
from test_gdn_conv_step import _ConvByReference
from test_swiglu_joined import _SwigluByReference

from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.models.base import use_kernels
from kernels.kernel_set import NO_KERNELS, KernelSet

PROMPTS = [[5, 17, 200, 3, 99, 42, 7], [8, 1, 64, 2, 30], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
STEPS = 5


class _AllByReference(_StepByReference, _ConvByReference, _AddNormByReference,
                      _GatedNormByReference, _AttentionByReference, _StepNormByReference,
                      _ChunkConvByReference, _SwigluByReference):
    """Every contract above at once (moe_route and the chunk recurrence stay off; the
    prompts' conv is gdn_conv_chunk's)."""


def _model(model_type: str):
    config = tiny_config(model_type)
    text = config.get("text_config", config)
    text.update(linear_key_head_dim=32, linear_value_head_dim=32, head_dim=32)
    model = build_model(config, random_weights(config, seed=5))
    model.fuse_projections()
    return model


def _decode(model, kernels: KernelSet, compiled: bool) -> list[np.ndarray]:
    """Prefill the prompts (3 rows), then STEPS decode steps (3 rows run as 4): logits."""
    use_kernels(model, kernels)
    runner = Runner(model, EngineConfig(max_num_seqs=8, page_size=4, num_pages=64,
                                        prefix_cache=False, prefill_chunk=16,
                                        fixed_shapes=True, compile_decode=compiled))
    seqs = []
    for i, prompt in enumerate(PROMPTS):
        s = Sequence(i, prompt)
        s.pages, s.slot, s.prefill_target = list(range(1 + 8 * i, 9 + 8 * i)), i, len(prompt)
        seqs.append(s)
    mx.eval(runner.prefill([PrefillChunk(s, 0, len(s.prompt_ids)) for s in seqs]),
            runner.cache_arrays())
    out = []
    for step in range(STEPS):
        for i, s in enumerate(seqs):
            s.num_computed = s.num_tokens
            s.output_ids.append(20 + 7 * step + i)
        logits = runner.decode(seqs)
        mx.eval(logits, runner.cache_arrays())
        out.append(np.array(logits.astype(mx.float32)))
    return out


def _compare(model, kernels: KernelSet, compiled: bool, what: str) -> None:
    plain = _decode(model, NO_KERNELS, compiled)
    got = _decode(model, kernels, compiled)
    depth = model_depth(model, max(map(len, PROMPTS)) + STEPS)
    for step, (g, p) in enumerate(zip(got, plain)):
        assert_close(g, p, depth, f"{what}, decode step {step}")


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
@pytest.mark.parametrize("compiled", [False, True])
def test_the_kernels_contracts_decode_as_the_plain_path(model_type, compiled):
    _AllByReference.calls = []          # each contract class appends here when it runs
    _compare(_model(model_type), _AllByReference("cuda", (("moe_route", "test"),
                                                         ("gated_delta_chunk", "test"))),
             compiled, f"{model_type} by reference")
    calls = _AllByReference.calls
    # decode's step and gated norm: the fused kernel (gated_rms_norm: prefill's, 4-D)
    assert {"prep", "paged", "step_norm"} <= set(c for c in calls if not isinstance(c, tuple))
    assert {len(c) for c in calls if isinstance(c, tuple)} == {2, 4}   # add_rms_norm, gated


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
@pytest.mark.parametrize("compiled", [False, True])
def test_the_kernels_decode_as_the_plain_path(backend, model_type, compiled):
    """The real launches: every kernel on, states and K/V written in place."""
    _compare(_model(model_type), KernelSet(backend), compiled, f"{model_type} on {backend}")
