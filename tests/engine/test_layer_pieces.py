"""A prompt chunk's forward run a layer range at a time (engine/models/layer_pieces.py)
leaves the logits and the cache one whole forward leaves, with decode steps of other
rows run between its pieces, as a step loop reading a chunk over steps would run them."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from cache_outside_scratch import cache_outside_scratch
from float32_tolerance import assert_close, model_depth
from tiny_models import tiny_model

from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.models.layer_pieces import Carry, layer_bounds

RNG = np.random.default_rng(23)
STREAMS = [RNG.integers(0, 320, n).tolist() for n in (7, 12)]    # decoding beside it
PROMPT = RNG.integers(0, 320, 19).tolist()                      # the chunk read in pieces
MODELS = ["llama", "qwen3_5_moe", "qwen3_5", "qwen3_next"]


def _model(kind: str):
    return tiny_model(kind, qwen_seed=9, llama_layers=2)


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return _model(request.param)


def _num_layers(model) -> int:
    return len(model.layers)


def _setup(model):
    """A runner with two streams cached but their last token, and the prompt's chunk."""
    config = EngineConfig(max_num_seqs=4, page_size=4, num_pages=40, prefix_cache=False,
                          prefill_chunk=32, fixed_shapes=True)
    runner = Runner(model, config)
    seqs = []
    for i, ids in enumerate(STREAMS + [PROMPT]):
        s = Sequence(i, list(ids))
        s.pages, s.slot = list(range(1 + 12 * i, 13 + 12 * i)), i
        s.prefill_target = len(ids) - (i < len(STREAMS))
        seqs.append(s)
    *streams, prompt = seqs
    mx.eval(runner.prefill([PrefillChunk(s, 0, s.prefill_target) for s in streams]),
            runner.cache_arrays())
    for s in streams:
        s.num_computed = s.prefill_target
    return runner, streams, [PrefillChunk(prompt, 0, len(PROMPT))]


def _decode_step(runner: Runner, streams) -> list[tuple[list[int], np.ndarray]]:
    """One decode step of the streams, each then taking its greedy token (a recurrent
    state moves on with every step) -> (the ids each row read, its logits)."""
    logits = runner.decode(streams)
    mx.eval(logits, runner.cache_arrays())
    out = []
    for s, row in zip(streams, np.array(logits)):
        out.append((list(s.all_ids), row))
        s.num_computed = s.num_tokens
        s.output_ids.append(int(row.argmax()))
    return out


def _in_pieces(runner: Runner, chunks, pieces: int, streams=None) -> tuple:
    """The chunks' forward in `pieces` layer ranges, each evaluated on its own (a step
    each), a decode step of `streams` after every piece but the last when given ->
    (the chunks' logits, each decode step's (ids, logits) a row)."""
    inputs = runner.prefill_inputs(chunks)
    carry, decoded = None, []
    bounds = layer_bounds(_num_layers(runner.model), pieces)
    for i, span in enumerate(bounds):
        out = runner.prefill_piece(chunks, span, carry, inputs)
        if i < len(bounds) - 1:
            assert isinstance(out, Carry)
            mx.eval(out.h, *([out.pending] if out.pending is not None else []),
                    runner.cache_arrays())
            carry = out
            if streams:
                decoded.append(_decode_step(runner, streams))
        else:
            mx.eval(out, runner.cache_arrays())
            return out, decoded


def test_layer_bounds_cover_every_layer_once_in_near_equal_ranges():
    assert layer_bounds(40, 4) == [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert layer_bounds(30, 4) == [(0, 8), (8, 15), (15, 22), (22, 30)]
    assert layer_bounds(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert layer_bounds(5, 1) == [(0, 5)]
    for bad in (0, 6):
        with pytest.raises(ValueError):
            layer_bounds(5, bad)


def test_a_piece_needs_the_carry_of_the_one_before_it(model):
    runner, _, chunks = _setup(model)
    n = _num_layers(model)
    with pytest.raises(ValueError):
        runner.prefill_piece(chunks, (1, n))                 # no carry past layer 0
    first = runner.prefill_piece(chunks, (0, 1))
    with pytest.raises(ValueError):
        runner.prefill_piece(chunks, (0, n), first)          # a carry into layer 0
    with pytest.raises(ValueError):
        runner.prefill_piece(chunks, (1, n + 1), first)      # past the last layer


@pytest.mark.parametrize("pieces", [2, 3])
def test_pieces_leave_the_logits_and_cache_of_the_whole_forward(model, pieces):
    """The same ops in the same order, split at layer boundaries and evaluated apart:
    the same numbers, bit for bit."""
    runner, _, chunks = _setup(model)
    before = [np.array(a) for a in runner.cache_arrays()]
    whole = runner.prefill(chunks)
    mx.eval(whole, runner.cache_arrays())
    want_cache = cache_outside_scratch(runner)
    runner.cache.set_arrays([mx.array(a) for a in before])
    got, _ = _in_pieces(runner, chunks, min(pieces, _num_layers(model)))
    np.testing.assert_array_equal(np.array(got), np.array(whole))
    for a, b in zip(cache_outside_scratch(runner), want_cache):
        np.testing.assert_array_equal(a, b)


def test_decode_steps_between_the_pieces_change_neither_the_chunk_nor_themselves(model):
    """A decode step of the streams between every two pieces: the chunk's logits are its
    sequence's alone, and each stream's logits are its own alone (its pages and slot are
    not the chunk's)."""
    runner, streams, chunks = _setup(model)
    n = _num_layers(model)
    got, decoded = _in_pieces(runner, chunks, n, streams)
    assert len(decoded) == n - 1
    depth = model_depth(model, len(PROMPT) + 2)
    assert_close(np.array(got)[0], np.array(runner.full_logits(PROMPT)[-1]), depth, "chunk")
    for i, step in enumerate(decoded):
        for s, (ids, row) in zip(streams, step):
            assert_close(row, np.array(runner.full_logits(ids)[-1]), depth,
                         f"stream {s.request_id}, step {i}")
