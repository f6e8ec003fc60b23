"""Prompt chunks and mixed steps through mx.compile (EngineConfig.compile_chunks,
engine/core/compiled_forward.py): the same logits and cache as the plain forwards, few
traces while a prompt is read beside streams, and the same tokens from an Engine."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from fakes import IdTokenizer
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import tiny_config
from test_compiled_decode import PROMPTS, _model

from engine.config import EngineConfig
from engine.core.compiled_forward import CompiledForward
from engine.core.engine import Engine
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams

PAGE = 4
CHUNK = 8
NEW_PROMPT = [(3 * j + 1) % 97 + 2 for j in range(37)]   # read in CHUNK-token chunks


def _runner(model, compile_chunks: bool) -> Runner:
    config = EngineConfig(max_num_seqs=8, page_size=PAGE, num_pages=96, prefix_cache=False,
                          prefill_chunk=CHUNK, fixed_shapes=True, compile_decode=False,
                          compile_chunks=compile_chunks)
    return Runner(model, config)


def _seq(i: int, ids: list[int]) -> Sequence:
    s = Sequence(i, ids)
    s.pages, s.slot, s.prefill_target = list(range(1 + 16 * i, 17 + 16 * i)), i, len(ids)
    return s


def _read_beside_streams(runner: Runner) -> list[np.ndarray]:
    """Three streams' prompts in one prefill, then NEW_PROMPT read in chunks, each chunk
    in a mixed step with the streams decoding; returns every step's logits."""
    streams = [_seq(i, p) for i, p in enumerate(PROMPTS)]
    out = [runner.prefill([PrefillChunk(s, 0, len(s.prompt_ids)) for s in streams])]
    mx.eval(out[0], runner.cache_arrays())
    prompt = _seq(len(streams), NEW_PROMPT)
    for step, start in enumerate(range(0, len(NEW_PROMPT), CHUNK)):
        for s in streams:
            s.num_computed = s.num_tokens
            s.output_ids.append(20 + step + s.request_id)
        n = min(CHUNK, len(NEW_PROMPT) - start)
        decode, chunk = runner.mixed(streams, [PrefillChunk(prompt, start, n)])
        mx.eval(decode, chunk, runner.cache_arrays())
        out += [decode, chunk]
    return [np.array(a.astype(mx.float32)) for a in out]


@pytest.mark.parametrize("kind", ["llama", "qwen3_5_moe"])
def test_compiled_chunks_give_the_plain_logits_and_cache(kind):
    model = _model(kind)
    runs = {}
    for compiled in (False, True):
        runner = _runner(model, compiled)
        logits = _read_beside_streams(runner)
        runs[compiled] = logits, [np.array(a) for a in runner.cache_arrays()]
    depth = model_depth(model, len(NEW_PROMPT) + max(map(len, PROMPTS)))
    for i, (plain, compiled) in enumerate(zip(runs[False][0], runs[True][0])):
        assert_close(compiled, plain, depth, f"{kind}: step {i} logits")
    for i, (plain, compiled) in enumerate(zip(runs[False][1], runs[True][1])):
        assert_close(compiled, plain, depth, f"{kind}: cache array {i}")


def test_a_prompt_read_beside_streams_traces_few_layouts():
    """37 tokens in 8-token chunks beside 3 streams: the decode group's layout never
    changes and the chunk's block table grows in power-of-two widths, so the traces are
    the chunk's first (a fresh row) and later layouts, not one per chunk."""
    runner = _runner(_model("qwen3_5_moe"), compile_chunks=True)
    traced = []
    original = runner.compiled_chunks._traced
    runner.compiled_chunks._traced = lambda key, cache: traced.append(key) or original(key, cache)
    _read_beside_streams(runner)
    mixed = [key for key in traced if key[0] == "groups"]
    assert len(traced) - len(mixed) == 1               # the streams' own prefill
    assert len(mixed) == 3      # fresh first chunk; later full chunks; the ragged last one
    assert len(runner.compiled_chunks._fns) == len(traced)


def test_an_engine_streams_the_same_tokens_with_compiled_chunks(monkeypatch):
    """Three streams decoding while a new prompt is read (mixed steps) through the
    Engine's public API: greedy tokens equal with and without compiled chunks."""
    calls = []
    groups = CompiledForward.groups
    monkeypatch.setattr(CompiledForward, "groups",
                        lambda self, *a: calls.append(1) or groups(self, *a))
    outs = {}
    for compiled in (False, True):
        config = EngineConfig(max_num_seqs=4, kv_budget_mb=8, prefill_chunk=CHUNK,
                              fixed_shapes=True, compile_decode=False, warm_up=False,
                              compile_chunks=compiled, min_stream_tok_s=0)
        model = InMemoryModel(_model("qwen3_5_moe"), IdTokenizer(), tiny_config(), "tiny")
        greedy = SamplingParams(max_tokens=24, temperature=0.0)
        with Engine.from_model(model, config) as engine:
            streams = [engine.submit(p, greedy) for p in PROMPTS]
            next(streams[0])                      # the streams decode from here on
            new = engine.submit(NEW_PROMPT, SamplingParams(max_tokens=6, temperature=0.0))
            outs[compiled] = [list(h.result().token_ids) for h in [*streams, new]]
    assert outs[True] == outs[False]
    assert len(calls) >= 2                # the new prompt's chunks rode on decode steps


def test_compile_chunks_must_be_a_bool():
    with pytest.raises(ValueError, match="compile_chunks"):
        EngineConfig(compile_chunks=None)


def test_after_the_warm_up_a_prompt_read_beside_streams_traces_nothing(monkeypatch):
    """Compiled chunks in two forwards (the GPU A/B's `--compile-chunks --no-mixed-forward`):
    the warm-up traces every chunk layout (shapes.chunk_layouts), so streams admitted and a
    long prompt read in chunks beside them trace no forward inside a step."""
    traces = []
    traced = CompiledForward._traced
    monkeypatch.setattr(CompiledForward, "_traced",
                        lambda self, key, cache: traces.append(key) or traced(self, key, cache))
    config = EngineConfig(max_num_seqs=4, page_size=PAGE, prefill_chunk=16, max_context=64,
                          kv_budget_mb=8, prefix_cache=False, fixed_shapes=True,
                          compile_decode=True, compile_chunks=True, mixed_forward=False,
                          warm_up=True)
    model = InMemoryModel(_model("qwen3_5_moe"), IdTokenizer(), tiny_config(), "tiny")
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    with Engine.from_model(model, config) as engine:
        engine.generate([[1, 2, 3]], SamplingParams(max_tokens=1))   # waits for the load
        assert engine.wait_for_warm_up(timeout=300)
        warmed = len(traces)
        streams = [engine.submit(p, greedy) for p in PROMPTS]
        next(streams[0])
        new = engine.submit(NEW_PROMPT, SamplingParams(max_tokens=4, temperature=0.0))
        outs = [h.result() for h in [*streams, new]]
    assert warmed > 0 and [len(o.token_ids) for o in outs] == [12] * len(PROMPTS) + [4]
    assert traces[warmed:] == []
