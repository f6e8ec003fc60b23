"""Decode through mx.compile (engine/core/compiled_forward.py): the same logits as each
sequence read alone, the cache written as the plain forward writes it, and few traces."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from cache_outside_scratch import cache_outside_scratch
from fakes import IdTokenizer
from float32_tolerance import assert_close, model_depth, tolerance
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama

from engine.config import EngineConfig
from engine.core.compiled_forward import CompiledForward
from engine.core.engine import Engine
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams

PROMPTS = [[5, 17, 200, 3, 99, 42, 7], [8, 1, 64, 2, 30], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
PAGE = 4
STEPS = 6


def _model(kind: str):
    if kind == "llama":
        return tiny_llama()
    config = tiny_config(kind)
    model = build_model(config, random_weights(config, seed=3))
    model.fuse_projections()
    return model


def _runner(model, compiled: bool) -> Runner:
    config = EngineConfig(max_num_seqs=8, page_size=PAGE, num_pages=64, prefix_cache=False,
                          prefill_chunk=16, fixed_shapes=True, compile_decode=compiled)
    return Runner(model, config)


def _decode_steps(runner: Runner, next_ids: list[list[int]]) -> list[np.ndarray]:
    """Prefill every prompt, then decode STEPS steps feeding next_ids[step][row];
    returns each step's logits [3, V] (float32)."""
    seqs = []
    for i, prompt in enumerate(PROMPTS):
        s = Sequence(i, prompt)
        s.pages, s.slot, s.prefill_target = list(range(1 + 8 * i, 9 + 8 * i)), i, len(prompt)
        seqs.append(s)
    mx.eval(runner.prefill([PrefillChunk(s, 0, len(s.prompt_ids)) for s in seqs]),
            runner.cache_arrays())
    out = []
    for step in range(STEPS):
        for s, ids in zip(seqs, next_ids[step]):
            s.num_computed = s.num_tokens
            s.output_ids.append(ids)
        logits = runner.decode(seqs)                          # 3 rows run as 4
        mx.eval(logits, runner.cache_arrays())
        out.append(np.array(logits.astype(mx.float32)))
    return out


@pytest.mark.parametrize("kind", ["qwen3_5_moe", "qwen3_5", "llama"])
def test_compiled_decode_gives_each_sequence_its_own_logits(kind):
    model = _model(kind)
    rng = np.random.default_rng(0)
    next_ids = rng.integers(10, 200, (STEPS, len(PROMPTS))).tolist()
    runner = _runner(model, compiled=True)
    assert runner.compiled is not None
    steps = _decode_steps(runner, next_ids)
    reference = _runner(model, compiled=False)
    for row, prompt in enumerate(PROMPTS):
        ids = prompt + [next_ids[s][row] for s in range(STEPS)]
        alone = np.array(reference.full_logits(ids))          # [T, V], one sequence
        for step in range(STEPS):
            assert_close(steps[step][row], alone[len(prompt) + step],
                         model_depth(model, len(ids)), f"row {row}, step {step}")


def test_compiled_decode_writes_the_cache_the_plain_forward_writes():
    model = _model("qwen3_5_moe")
    next_ids = [[20 + s, 30 + s, 40 + s] for s in range(STEPS)]
    runs = {}
    for compiled in (False, True):
        runner = _runner(model, compiled)
        _decode_steps(runner, next_ids)
        runs[compiled] = cache_outside_scratch(runner)
    # Not bit-equal on CUDA: a compiled forward fuses elementwise chains, whose kernels
    # evaluate exp/sigmoid apart from the separate ones; the logits test bounds the effect.
    depth = model_depth(model, max(map(len, PROMPTS)) + STEPS)
    for i, (plain, compiled) in enumerate(zip(runs[False], runs[True])):
        assert_close(compiled, plain, depth, f"cache array {i}")


def test_traces_stay_few_as_the_context_grows():
    """Block tables grow in power-of-two widths: 3 rows decoding from ~8 to 70 tokens
    (2 to 18 pages of 4) trace one layout per width, not one per page or step."""
    runner = _runner(tiny_llama(), compiled=True)
    traced = []
    original = runner.compiled._traced
    runner.compiled._traced = lambda key, cache: traced.append(key) or original(key, cache)
    seqs = []
    for i, prompt in enumerate(PROMPTS):
        s = Sequence(i, prompt)
        s.pages, s.slot, s.num_computed = list(range(1 + 20 * i, 21 + 20 * i)), i, len(prompt) - 1
        seqs.append(s)
    widths = set()
    for _ in range(60):
        view_width = runner.build_view([(s.pages, s.slot, s.num_tokens - 1, 1) for s in seqs],
                                       1, stable=True).block_tables.shape[1]
        widths.add(view_width)
        mx.eval(runner.decode(seqs), runner.cache_arrays())
        for s in seqs:
            s.num_computed = s.num_tokens
            s.output_ids.append(7)
    assert widths == {8, 16, 32}
    assert len(traced) == 1                   # one static layout; shapes are mx.compile's key


def test_an_engine_decodes_the_same_tokens_compiled_or_not(monkeypatch):
    calls = []
    call = CompiledForward.__call__
    monkeypatch.setattr(CompiledForward, "__call__",
                        lambda self, *a: calls.append(1) or call(self, *a))
    outs = {}
    for compiled in (False, True):
        config = EngineConfig(max_num_seqs=4, kv_budget_mb=8, prefill_chunk=16,
                              fixed_shapes=True, compile_decode=compiled, warm_up=compiled)
        model = InMemoryModel(_model("qwen3_5_moe"), IdTokenizer(), tiny_config(), "tiny")
        with Engine.from_model(model, config) as engine:
            outs[compiled] = [o.token_ids for o in engine.generate(
                PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))]
    assert len(calls) >= 11                   # every decode step of the compiled run
    # Every token the compiled engine chose is a greedy choice of the plain forward (the
    # same weights and kernels, one sequence alone), up to float32 rounding: the chosen
    # logit and the largest may each move by the tolerance.
    reference = _runner(model.model, compiled=False)
    depth = model_depth(model.model, max(map(len, PROMPTS)) + 12)
    for prompt, out in zip(PROMPTS, outs[True]):
        logits = np.array(reference.full_logits(prompt + list(out)))
        for j, token in enumerate(out):
            row = logits[len(prompt) - 1 + j]
            assert row[token] >= row.max() - 2 * tolerance(row, depth), (prompt, j, token)
    if mx.default_device().type == mx.DeviceType.cpu:
        # On the CPU the compiled forward rounds as the plain one: the same tokens. On a
        # GPU fused elementwise kernels round apart, so where two logits of a random tiny
        # model are closer than that the greedy choice may differ, and every later token
        # with it (seen on the H200: docs/bench/h200-session6-2026-12-02.txt, "diag").
        assert outs[True] == outs[False]


def test_compile_decode_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="compile_decode"):
        EngineConfig(compile_decode="yes")


def test_a_layout_that_cannot_be_traced_runs_plain(monkeypatch):
    """mx.compile refusing a trace costs speed, never a step: the same logits, said once."""
    import engine.core.compiled_forward as cf
    model = _model("llama")
    next_ids = [[20 + s, 30 + s, 40 + s] for s in range(STEPS)]
    expected = _decode_steps(_runner(model, compiled=False), next_ids)

    def refuse(fn):
        def traced(*args):
            raise ValueError("cannot trace this")
        return traced
    monkeypatch.setattr(cf.mx, "compile", refuse)
    runner = _runner(model, compiled=True)
    with pytest.warns(RuntimeWarning, match="uncompiled"):
        got = _decode_steps(runner, next_ids)
    for a, b in zip(got, expected):
        assert_close(a, b, model_depth(model, max(map(len, PROMPTS)) + STEPS))
    assert runner.compiled.num_layouts == 0
