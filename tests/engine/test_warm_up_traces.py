"""After the warm-up, decoding traces nothing new (issue 23): every compiled decode shape
a run can meet (batch sizes as rows arrive, block-table widths as contexts grow) was
traced at load, so no decode step pays for a trace. The signature is the count of
mx.compile traces, not a timing."""
from __future__ import annotations

from fakes import IdTokenizer
from qwen_fixtures import build_model, random_weights, tiny_config

from engine.config import EngineConfig
from engine.core.compiled_forward import CompiledForward
from engine.core.engine import Engine
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams

PAGE = 4
# One prompt per step (each pads to the 16-token chunk): the batch grows 1, 2, 3, 4.
PROMPTS = [list(range(10, 10 + n)) for n in (13, 14, 15, 16)]
# 40 tokens more take every context from 13-16 tokens past 32 (8 pages of 4: the first
# block-table width) to 53-56 (width 16).
MAX_TOKENS = 40


def _count_traces(monkeypatch) -> tuple[list, set]:
    """(traces, shapes): each trace mx.compile makes of a compiled forward (the traced
    Python function runs once per trace, never on a replay) as (key, batch, table
    width), and every compiled call's (batch, table width)."""
    traces, shapes = [], set()
    traced, call = CompiledForward._traced, CompiledForward.__call__

    def counting(self, key, cache):
        forward = traced(self, key, cache)

        def counted(*inputs):
            tokens, block_tables = inputs[0], inputs[5]     # as CompiledForward passes them
            traces.append((key, tokens.shape[0], block_tables.shape[1]))
            return forward(*inputs)
        return counted

    def seen(self, tokens, view, cache):
        shapes.add((tokens.shape[0], view.block_tables.shape[1]))
        return call(self, tokens, view, cache)
    monkeypatch.setattr(CompiledForward, "_traced", counting)
    monkeypatch.setattr(CompiledForward, "__call__", seen)
    return traces, shapes


def _model() -> InMemoryModel:
    config = tiny_config("qwen3_5_moe")
    model = build_model(config, random_weights(config, seed=3))
    model.fuse_projections()
    return InMemoryModel(model, IdTokenizer(), config, "tiny")


def test_a_decode_after_the_warm_up_traces_nothing(monkeypatch):
    """The bench's decode run in small: rows arriving one per step, then decoding on
    while every context crosses a block-table width, as a GPU runs it (fixed shapes,
    compiled decode, uncompiled chunks, the warm-up at load)."""
    traces, shapes = _count_traces(monkeypatch)
    config = EngineConfig(max_num_seqs=4, page_size=PAGE, prefill_chunk=16, max_context=64,
                          kv_budget_mb=8, prefix_cache=False, fixed_shapes=True,
                          compile_decode=True, warm_up=True)
    with Engine.from_model(_model(), config) as engine:
        engine.generate([[1, 2, 3]], SamplingParams(max_tokens=1))   # waits for the load
        assert engine.wait_for_warm_up(timeout=300)   # and its background part
        assert traces, "the warm-up traces the compiled decode"
        traces.clear()
        shapes.clear()
        outs = engine.generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS))
    assert [len(o.token_ids) for o in outs] == [MAX_TOKENS] * len(PROMPTS)
    # It did meet what the run met: the batch growing, and a new table width.
    assert {b for b, _ in shapes} == {1, 2, 4} and {w for _, w in shapes} == {8, 16}
    assert traces == []


