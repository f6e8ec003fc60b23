"""engine/core/pool_scatters.py: on a GPU a scatter into a cache pool is queued only after
a wait, so no earlier reader still holds the pool and MLX updates it in place instead of
copying it (the GPU suite's tests/engine/test_mixed_step_memory.py measures the copy on
a GPU; here, the signature: who notes, when the step waits, and that nothing else does).
The GPU is stood in for by making `gpu_backend` answer "cuda": `mx.synchronize` is then
a wait on the CPU stream, harmless."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from tiny_models import tiny_llama

import engine.core.pool_scatters as pool_scatters
from engine.cache.cache_manager import DeviceCopies
from engine.config import EngineConfig
from engine.core.batch_view import BatchView
from engine.core.compiled_forward import CompiledForward
from engine.core.runner import Runner


@pytest.fixture
def on_gpu(monkeypatch):
    monkeypatch.setattr(pool_scatters, "gpu_backend", lambda: "cuda")
    pool_scatters.take()            # no note left over from another test
    return pool_scatters.waits()


def test_a_wait_only_after_a_scatter_was_noted(on_gpu):
    assert not pool_scatters.settle()                   # nothing noted: no wait
    pool_scatters.note()
    assert pool_scatters.settle()
    assert not pool_scatters.settle()                   # once a note
    assert pool_scatters.waits() == on_gpu + 1


def test_on_the_cpu_a_note_never_waits(monkeypatch):
    monkeypatch.setattr(pool_scatters, "gpu_backend", lambda: None)    # as on the CPU
    before = pool_scatters.waits()
    pool_scatters.note()
    pool_scatters.queue(mx.zeros(3))
    assert pool_scatters.waits() == before and not pool_scatters.take()


def test_a_page_copy_queues_its_gathers_and_waits_before_its_scatters(on_gpu):
    runner = Runner(tiny_llama(), EngineConfig(max_num_seqs=2, num_pages=8, page_size=4))
    rng = np.random.default_rng(0)
    for pair in runner.cache.kv:
        for i, pool in enumerate(pair):
            pair[i] = mx.array(rng.normal(size=pool.shape).astype(np.float32))
    mx.eval(runner.cache_arrays())
    want = [np.array(p) for pair in runner.cache.kv for p in pair]
    runner.copy(DeviceCopies(pages=[(1, 5), (2, 6)]))
    assert pool_scatters.waits() == on_gpu              # built, not queued yet
    pool_scatters.queue(runner.cache_arrays())
    assert pool_scatters.waits() == on_gpu + 1
    for w, got in zip(want, (p for pair in runner.cache.kv for p in pair)):
        w[20:28] = w[4:12]                              # pages 1, 2 -> 5, 6 (4 rows each)
        np.testing.assert_array_equal(np.array(got), w)


def test_a_state_snapshot_does_not_wait(on_gpu):
    """Runner.copy_state_slots: the state pools are bounded by the slots, and the snapshot
    lands in the first step after a prompt ends, which a wait would stall."""
    from qwen_fixtures import build_model, random_weights, tiny_config
    config = tiny_config("qwen3_5_moe")
    runner = Runner(build_model(config, random_weights(config, seed=2)),
                    EngineConfig(max_num_seqs=4, num_pages=8, page_size=4))
    mx.eval(runner.cache_arrays())
    runner.copy(DeviceCopies(states=[(0, 2), (1, 3)]))
    pool_scatters.queue(runner.cache_arrays())
    assert pool_scatters.waits() == on_gpu


def test_a_compiled_forward_notes_its_scatters_on_every_replay():
    """mx.compile runs the Python forward once (its trace): a replay must note again."""
    model = tiny_llama()
    runner = Runner(model, EngineConfig(max_num_seqs=2, num_pages=8, page_size=4))
    compiled = CompiledForward(model)
    pool_scatters.take()
    for step in range(3):
        view: BatchView = runner.build_view([([1, 2], 0, 4 + step, 1)], 1, stable=True)
        compiled(mx.array([[7]], mx.int32), view, runner.cache)
        assert pool_scatters.take(), step               # the plain decode scatters K/V


@pytest.mark.parametrize("layout", ["qwen3.5", "llama"])
@pytest.mark.parametrize("batch", [1, 16])
def test_a_gpu_decode_step_builds_no_pool_scatter(layout, batch):
    """The real models' decode on a GPU writes K/V and states in place by kernels (counted
    here by their stand-ins, compiled as on a GPU): it never waits, so steps stay
    pipelined. A wait there would hold the host to the GPU every step."""
    from engine.bench import profile_ops
    make_config = profile_ops.LAYOUTS[layout][0]
    pool_scatters.take()
    ops = profile_ops.ours(make_config(4), batch, 64, "gpu")
    assert not pool_scatters.take()
    assert not [op for op in ops if "Scatter" in op], ops


def test_a_chunk_queued_in_pieces_waits_before_its_first_piece_only(on_gpu):
    """engine/core/bounded_prefill.py: each piece scatters its layers' K/V; only the first
    can find a reader of its pools still queued (the steps before the chunk)."""
    from engine.core.bounded_prefill import queue_in_pieces
    from engine.models.layer_pieces import Carry

    def piece(span, carry):
        pool_scatters.note()                        # its attention layers' K/V writes
        h = mx.full((2, 4), float(span[0]))
        return Carry(h, None) if span[1] < 8 else h.sum(axis=1)

    out = queue_in_pieces(piece, num_layers=8, pieces=4, cache_arrays=list)
    assert out.tolist() == [24.0, 24.0]             # the last piece's logits
    assert pool_scatters.waits() == on_gpu + 1
    assert not pool_scatters.take()                 # nor before the step queues the last
