"""A prompt read beside streams a layer range a step (EngineConfig.chunk_pieces,
engine/core/chunk_pieces.py): the same replies as whole chunks, the budget told a step's
share, turn snapshots taken only once the whole chunk is read, and a chain that ends early
(its request cancelled) leaving no kept turn of a state half read."""
from __future__ import annotations

import numpy as np
import pytest
from engine_harness import Harness
from float32_tolerance import assert_close, model_depth
from tiny_models import tiny_model

import engine.core.chunk_pieces as chunk_pieces
from engine.config import EngineConfig
from engine.core.chunk_pieces import effective, pieces_of
from engine.core.compiled_forward import runs_mixed_forwards
from engine.events import FinishedEvent, StepEvent

RNG = np.random.default_rng(31)
STREAMS = [RNG.integers(0, 320, n).tolist() for n in (9, 5, 13)]
LATER = RNG.integers(0, 320, 21).tolist()       # three chunks of 8 beside the streams
NEXT_TURN = LATER + RNG.integers(0, 320, 4).tolist()   # starts with LATER: its kept turn
MODELS = ["llama", "qwen3_5_moe", "qwen3_5"]
GPU_LIKE = {"fixed_shapes": True, "pipeline_steps": True}    # a GPU's defaults, run here


def _model(kind: str):
    return tiny_model(kind, qwen_seed=4, llama_layers=4)


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return _model(request.param)


def _harness(model, pieces: int, **config) -> Harness:
    return Harness(model, **{"max_num_seqs": 4, "prefill_chunk": 8, "chunk_pieces": pieces,
                             "mixed_forward": False, **config})


def _replies(h: Harness) -> dict[int, tuple]:
    return {e.request_id: e.token_ids for e in h.events if isinstance(e, FinishedEvent)}


def _run(model, pieces: int, **config) -> Harness:
    """Three streams, a 21-token prompt arriving at step 4 (read beside them), then at
    step 40 the conversation's next turn, which reuses the first turn's kept state."""
    joins = {0: [(i, p, 12) for i, p in enumerate(STREAMS)], 4: [(3, LATER, 6)],
             40: [(4, NEXT_TURN, 5)]}
    return _harness(model, pieces, **config).run(joins)


@pytest.mark.parametrize("pieces,config", [(2, {}), (4, {}), (4, GPU_LIKE)])
def test_a_prompt_read_in_pieces_beside_streams_gives_the_same_replies(model, pieces, config):
    whole, split = _run(model, 1, **config), _run(model, pieces, **config)
    assert _replies(split) == _replies(whole) and len(_replies(whole)) == 5
    # every logits row too, the chunk's last piece's included (the same ops in the same
    # order a layer range at a time; the steps' batches may differ: float32 reordering)
    depth = model_depth(model, len(NEXT_TURN) + 12)
    for rid, rows in whole.logits.items():
        assert len(split.logits[rid]) == len(rows), rid
        for a, b in zip(split.logits[rid], rows):
            assert_close(a, b, depth, f"request {rid}")
    reasons = [e.chunk_reason for e in split.steps if e.chunk_reason.startswith("piece")]
    # pieces 2..K of each of LATER's chunks are steps of their own, beside the streams
    assert reasons.count(f"piece {pieces}/{pieces}") >= 2, reasons
    # each such step tells the budget a K-th of the chunk it reads
    mixed = [e for e in split.steps if e.kind == "mixed" and e.batch_size]
    assert mixed and all(e.prefill_tokens <= effective(8, pieces) for e in mixed)
    assert split.loop.pieces.chain is None and not split.loop.pieces.held


def test_the_next_turn_reuses_the_state_kept_after_the_whole_chunk(model):
    """NEXT_TURN matches LATER's kept turn only where the state was snapshotted (a
    recurrent model's) or its pages kept: its reply equals the one read whole."""
    whole, split = _run(model, 1), _run(model, 4)
    assert _replies(split)[4] == _replies(whole)[4]


@pytest.mark.parametrize("config", [{}, GPU_LIKE])
def test_a_chain_whose_request_is_cancelled_keeps_no_half_read_turn(config):
    """LATER (its last chunk read in pieces) is cancelled between two pieces: its turn
    snapshot, taken when that chunk was planned, is dropped with its copy, and the next
    prompt with LATER's ids reads them itself (the same reply as on a fresh engine)."""
    model = _model("qwen3_5")
    h = _harness(model, 4, **config)
    streams = [h.add(i, p, 40) for i, p in enumerate(STREAMS)]
    while not all(s.output_ids for s in streams):        # all three streaming
        h.loop.step()
    h.add(3, LATER, 6)
    while not (h.loop.pieces.chain and h.loop.pieces.chain.chunks[0].is_last and h.loop.pieces.chain.next == 2):
        h.loop.step()
        h.loop.cache.check_invariants()
    kept = len(h.loop.cache.prefix.entries)
    h.loop.cancel(3)
    h.loop.step()
    assert h.loop.pieces.chain is None
    assert len(h.loop.cache.prefix.entries) < kept        # the snapshot is gone
    h.add(4, NEXT_TURN, 5)
    h.run()
    fresh = _harness(model, 1, **config)
    fresh.add(4, NEXT_TURN, 5)
    fresh.run()
    assert _replies(h)[4] == _replies(fresh)[4]


def test_pieces_are_a_power_of_two_and_need_two_forwards_of_plain_chunks():
    for bad in (0, 3, 16):
        with pytest.raises(ValueError, match="chunk_pieces"):
            EngineConfig(chunk_pieces=bad)
    with pytest.raises(ValueError, match="two forwards"):
        EngineConfig(chunk_pieces=4, mixed_forward=True)
    with pytest.raises(ValueError, match="plain chunks"):
        EngineConfig(chunk_pieces=4, compile_chunks=True)
    with pytest.raises(ValueError, match="multiple of chunk_pieces"):
        EngineConfig(chunk_pieces=8, prefill_chunk=12)
    assert not runs_mixed_forwards(EngineConfig(chunk_pieces=2, compile_decode=False))


@pytest.mark.parametrize("config", [{}, GPU_LIKE])
def test_a_chain_whose_sequence_is_preempted_ends_and_its_prompt_is_read_again(model, config):
    """The scheduler preempts LATER between two pieces of its chunk (as when the streams
    outgrow the pool): the chain ends, no piece writes its freed pages or slot, and
    LATER, read again from its ids, replies as it does read whole. GPU_LIKE: a GPU's
    defaults (fixed shapes, pipelined steps), where the step the chain ended under is
    decode only and must be priced as such: on the H200 it asked the budget for a
    0-token chunk's padded length and raised (session 30)."""
    want = _replies(_run(model, 1, **config))
    h = _harness(model, 4, **config)
    streams = [h.add(i, p, 12) for i, p in enumerate(STREAMS)]
    while not all(s.output_ids for s in streams):        # all three streaming
        h.loop.step()
    later = h.add(3, LATER, 6)
    while not (h.loop.pieces.chain and h.loop.pieces.chain.chunks[0].seq is later
               and h.loop.pieces.chain.chunks[0].start > 0 and h.loop.pieces.chain.next == 2):
        h.loop.step()
    h.loop.flush()                      # preempting needs every token on the host
    h.loop.scheduler.preempt(later)
    h.loop.step()
    assert h.loop.pieces.chain is None and later.num_computed == 0
    h.add(4, NEXT_TURN, 5)
    h.run()
    got = _replies(h)
    assert got[3] == want[3] and all(got[i] == want[i] for i in range(3))


def test_prompts_sent_to_every_pane_at_once_are_read_in_one_chunk_in_pieces(model):
    """Two prompts arriving together beside the streams (the broadcast box): one chunk
    forward of both rows, padded to the fixed lengths, run in pieces; the replies are
    those of whole chunks."""
    joins = {0: [(i, p, 12) for i, p in enumerate(STREAMS)],
             4: [(3, LATER, 6), (4, NEXT_TURN[:13], 6)]}
    whole = _harness(model, 1, max_num_seqs=6, fixed_shapes=True).run(joins)
    split = _harness(model, 4, max_num_seqs=6, fixed_shapes=True).run(joins)
    assert _replies(split) == _replies(whole) and len(_replies(whole)) == 5
    both = [e for e in split.steps if len(e.prefill_request_ids) == 2]
    assert any(e.chunk_reason.startswith("piece") for e in both), [
        (e.prefill_request_ids, e.chunk_reason) for e in split.steps]


@pytest.mark.parametrize("kind", ["llama", "qwen3_5_moe"])
def test_through_the_public_engine_pieces_give_the_replies_and_kept_turns_of_whole_chunks(
        kind, tmp_path):
    """Engine.load with chunk_pieces=4 and a disk cache: prompts of different lengths sent
    together (the long ones read in pieces beside the short ones' decode), then a new
    Engine resuming the longest conversation from the disk: the replies and the reuse of
    whole chunks."""
    from qwen_fixtures import random_weights, tiny_config, write_mlx_folder
    from tiny_models import write_tiny_llama

    from engine import Engine, SamplingParams
    if kind == "llama":
        folder = write_tiny_llama(tmp_path / "model")
    else:
        config = tiny_config(kind)
        folder = write_mlx_folder(tmp_path / "model", config, random_weights(config, seed=4))
    greedy = SamplingParams(max_tokens=6, temperature=0.0)
    prompts = [STREAMS[1], LATER + STREAMS[0], LATER * 3]

    def conversation(pieces: int) -> tuple[list, list]:
        # no floor: whole chunks of 16 either way, the same plan on any machine
        cfg = dict(num_pages=96, page_size=4, prefill_chunk=16, chunk_pieces=pieces,
                   mixed_forward=False, min_stream_tok_s=0.0,
                   cache_dir=str(tmp_path / f"cache{pieces}"))
        with Engine.load(folder, EngineConfig(**cfg)) as engine:
            engine.add_listener(lambda ev: isinstance(ev, StepEvent) and steps.append(ev))
            first = engine.generate(prompts, greedy)
        follow = prompts[2] + list(first[2].token_ids) + [11, 12, 13]
        with Engine.load(folder, EngineConfig(**cfg)) as engine:
            resumed = engine.generate([follow], greedy)[0]
        return ([r.token_ids for r in first] + [resumed.token_ids],
                [resumed.stats.cached_tokens])

    steps: list[StepEvent] = []
    whole = conversation(1)
    assert not any(e.chunk_reason.startswith("piece") for e in steps)
    assert conversation(4) == whole
    assert any(e.chunk_reason.startswith("piece") for e in steps)     # read in pieces


def test_the_default_reads_in_four_pieces_on_a_cuda_gpu_where_it_can(monkeypatch):
    """chunk_pieces=None: 4 on a CUDA GPU (measured there), 1 on the CPU and Metal, and 1
    wherever pieces cannot run (a mixed forward, compiled chunks, a chunk length not a
    multiple, fewer layers, the distributed engine's runner); a set value stands."""
    assert pieces_of(EngineConfig()) == (4 if chunk_pieces.on_cuda() else 1)
    monkeypatch.setattr(chunk_pieces, "on_cuda", lambda: True)
    assert pieces_of(EngineConfig()) == 4
    assert not runs_mixed_forwards(EngineConfig(compile_decode=False))
    for config in (EngineConfig(mixed_forward=True), EngineConfig(compile_chunks=True),
                   EngineConfig(prefill_chunk=18)):
        assert pieces_of(config) == 1
    assert pieces_of(EngineConfig(), num_layers=2) == 1
    assert pieces_of(EngineConfig(), reads_in_pieces=False) == 1
    assert pieces_of(EngineConfig(chunk_pieces=2)) == 2
    monkeypatch.setattr(chunk_pieces, "on_cuda", lambda: False)
    assert pieces_of(EngineConfig()) == 1


def test_a_cuda_gpu_default_engine_reads_in_pieces_and_replies_as_whole_chunks(monkeypatch,
                                                                               model):
    """The step loop on a CUDA GPU's defaults (pieces chosen, fixed shapes, pipelined
    steps), run here: the prompt beside the streams is read in 4 pieces, and every reply
    is the one whole chunks give."""
    whole = _run(model, 1, **GPU_LIKE)
    monkeypatch.setattr(chunk_pieces, "on_cuda", lambda: True)
    auto = _run(model, None, **GPU_LIKE)
    assert auto.loop.pieces.k == 4
    assert any(e.chunk_reason == "piece 4/4" for e in auto.steps)
    assert _replies(auto) == _replies(whole)
