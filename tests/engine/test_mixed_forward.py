"""A mixed forward (decode rows and prompt chunks as one forward) gives each row what
one sequence run alone gives, padded or ragged, and the engine takes it."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from cache_outside_scratch import cache_outside_scratch
from engine_harness import Harness
from float32_tolerance import assert_close, model_depth
from tiny_models import tiny_llama, tiny_model

from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.events import FinishedEvent

RNG = np.random.default_rng(11)
STREAMS = [RNG.integers(0, 320, n).tolist() for n in (9, 5, 13)]   # decoding rows
NEW = RNG.integers(0, 320, 11).tolist()       # a prompt read whole beside them
LATER = RNG.integers(0, 320, 21).tolist()     # a prompt whose second chunk is read
FIRST = 6                                     # LATER's first chunk, read before
MODELS = ["llama", "qwen3_5_moe", "qwen3_5", "qwen3_next"]


def _model(kind: str):
    return tiny_model(kind, qwen_seed=5, llama_layers=2)


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return _model(request.param)


def _depth(model) -> int:
    """The rounding depth of the longest sequence here (LATER and its replies)."""
    return model_depth(model, len(LATER) + 12)


def _runner(model, fixed_shapes: bool) -> Runner:
    config = EngineConfig(max_num_seqs=8, page_size=4, num_pages=96, prefix_cache=False,
                          prefill_chunk=16, fixed_shapes=fixed_shapes)
    return Runner(model, config)


def _seq(i: int, prompt: list[int], target: int) -> Sequence:
    s = Sequence(i, list(prompt))
    s.pages, s.slot, s.prefill_target = list(range(1 + 12 * i, 13 + 12 * i)), i, target
    return s


def _setup(runner: Runner):
    """Three streams with all but their last token cached (decode feeds it), NEW not
    started, LATER with its first chunk cached; returns (streams, chunks)."""
    streams = [_seq(i, p, len(p) - 1) for i, p in enumerate(STREAMS)]
    new, later = _seq(3, NEW, len(NEW)), _seq(4, LATER, len(LATER))
    first = [PrefillChunk(s, 0, s.prefill_target) for s in streams]
    mx.eval(runner.prefill(first + [PrefillChunk(later, 0, FIRST)]), runner.cache_arrays())
    for s in streams:
        s.num_computed = s.prefill_target
    later.num_computed = FIRST
    return streams, [PrefillChunk(new, 0, len(NEW)), PrefillChunk(later, FIRST, len(LATER) - FIRST)]


def _alone(runner: Runner, ids: list[int]) -> np.ndarray:
    """The last token's logits of one sequence run alone in one shot (private cache)."""
    return np.array(runner.full_logits(ids)[-1])


@pytest.mark.parametrize("fixed_shapes", [True, False])
def test_mixed_logits_equal_each_sequence_alone_and_its_cache_serves_the_next_step(
        model, fixed_shapes):
    """3 decode rows (padded to 4 with fixed shapes) beside two ragged chunks (11 and 15
    tokens, padded to 16): each row's logits are its sequence's alone; then a decode
    step of all five reads what the mixed forward wrote and still matches alone."""
    runner = _runner(model, fixed_shapes)
    streams, chunks = _setup(runner)
    decode, prefill = runner.mixed(streams, chunks)
    mx.eval(decode, prefill, runner.cache_arrays())
    assert decode.shape == (3, 320) and prefill.shape == (2, 320)
    depth = _depth(model)
    for s, row in zip(streams, np.array(decode)):
        assert_close(row, _alone(runner, s.all_ids), depth, f"stream {s.request_id}")
    for c, row in zip(chunks, np.array(prefill)):
        assert_close(row, _alone(runner, c.seq.all_ids), depth, f"chunk {c.seq.request_id}")

    seqs = streams + [c.seq for c in chunks]
    nxt = np.concatenate([np.array(decode), np.array(prefill)]).argmax(axis=-1)
    for s, token in zip(seqs, nxt):
        s.num_computed = s.num_tokens
        s.output_ids.append(int(token))
    after = np.array(runner.decode(seqs))
    for s, row in zip(seqs, after):
        assert_close(row, _alone(runner, s.all_ids), depth, f"next step {s.request_id}")


def test_mixed_equals_the_two_forwards_it_replaces_and_writes_the_same_cache(model):
    """The same inputs through decode() then prefill() (each its own forward), from the
    same cache: the same logits, and the same K/V and states outside the scratch."""
    runner = _runner(model, True)
    streams, chunks = _setup(runner)
    before = [np.array(a) for a in runner.cache_arrays()]
    mixed = runner.mixed(streams, chunks)
    mx.eval(mixed, runner.cache_arrays())
    after_mixed = cache_outside_scratch(runner)
    for pair in runner.cache.kv:          # back to the state before the mixed forward
        pair[0], pair[1] = mx.array(before.pop(0)), mx.array(before.pop(0))
    for layer in runner.cache.states:
        for i in range(len(layer)):
            layer[i] = mx.array(before.pop(0))
    apart = runner.decode(streams), runner.prefill(chunks)
    mx.eval(apart, runner.cache_arrays())
    depth = _depth(model)
    for a, b in zip(mixed, apart):
        assert_close(a, b, depth, "logits")
    for i, (a, b) in enumerate(zip(after_mixed, cache_outside_scratch(runner))):
        assert_close(a, b, depth, f"cache array {i}")


def _streams_and_a_new_prompt(model, mixed_forward: bool, **config) -> Harness:
    h = Harness(model, max_num_seqs=4, prefill_chunk=8, mixed_forward=mixed_forward, **config)
    joins = {0: [(i, p, 12) for i, p in enumerate(STREAMS)],
             4: [(3, LATER, 6)]}               # 21 tokens: three chunks beside the streams
    return h.run(joins)


@pytest.mark.parametrize("fixed_shapes", [True, False])
def test_an_engine_gives_the_same_replies_with_and_without_mixed_forwards(
        model, fixed_shapes):
    on = _streams_and_a_new_prompt(model, True, fixed_shapes=fixed_shapes)
    off = _streams_and_a_new_prompt(model, False, fixed_shapes=fixed_shapes)
    assert on.num_mixed >= 3 and off.num_mixed == 0       # the new prompt's chunks
    assert sum(e.kind == "mixed" for e in on.steps) == on.num_mixed
    replies = {h: {e.request_id: e.token_ids for e in h.events if isinstance(e, FinishedEvent)}
               for h in (on, off)}
    assert replies[on] == replies[off] and len(replies[on]) == 4
    for rid, rows in off.logits.items():
        assert len(on.logits[rid]) == len(rows)
        for a, b in zip(on.logits[rid], rows):
            assert_close(a, b, _depth(model), f"request {rid}")


def test_mixed_forward_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="mixed_forward"):
        EngineConfig(mixed_forward=1)


def test_by_default_a_mixed_step_keeps_compiled_decode_rows_compiled():
    """None: one mixed forward, except where the decode rows would leave their compiled
    forward for an uncompiled one (the H200 measured that dearer than two forwards) or a
    chunk is read in layer pieces."""
    from engine.core.compiled_forward import runs_mixed_forwards
    assert runs_mixed_forwards(EngineConfig(compile_decode=False, chunk_pieces=1))
    assert not runs_mixed_forwards(EngineConfig(compile_decode=True, chunk_pieces=1))
    assert runs_mixed_forwards(EngineConfig(compile_decode=True, compile_chunks=True))
    # a chunk read in layer pieces is a forward of its own
    assert not runs_mixed_forwards(EngineConfig(compile_decode=False, chunk_pieces=4))
    assert not runs_mixed_forwards(EngineConfig(compile_decode=False, mixed_forward=False))
    assert runs_mixed_forwards(EngineConfig(compile_decode=True, mixed_forward=True))


def test_two_forwards_queue_the_decode_on_its_own_before_the_chunk(monkeypatch):
    """Without a mixed forward, a step's decode rows and prompt chunk are two forwards.
    The decode's kernels write the pools in place, which MLX's GPU backends order by
    declared outputs only, so the decode is queued (async_eval) by itself before the
    chunk's forward is built: its writes are committed before the chunk's scatter into
    the same pools (or the copy of a pool that scatter may make) can run."""
    import engine.core.step_loop as step_loop
    events = []
    real_eval = step_loop.mx.async_eval
    monkeypatch.setattr(step_loop.mx, "async_eval",
                        lambda *a: events.append("queued") or real_eval(*a))
    real_prefill, real_decode = Runner.prefill, Runner.decode
    monkeypatch.setattr(Runner, "prefill",
                        lambda self, chunks: events.append("chunk") or real_prefill(self, chunks))
    monkeypatch.setattr(Runner, "decode",
                        lambda self, seqs: events.append("decode") or real_decode(self, seqs))
    h = _streams_and_a_new_prompt(tiny_llama(), False)
    steps = "".join({"decode": "d", "chunk": "c", "queued": "q"}[e] for e in events)
    # Every step with both: its decode, the decode queued alone, then the chunk.
    assert steps.count("dqc") >= 3 and "dc" not in steps, steps
    assert h.num_mixed == 0
