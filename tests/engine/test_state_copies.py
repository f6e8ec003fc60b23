"""A plan's state-slot copies (turn snapshots) as one scatter a state array
(Runner.copy_state_slots), and on CUDA queued as a graph of their own before the forward
(StepLoop.step): a step's graph, and so the structures MLX's CUDA backend commits, no
longer change with how many prompts ended in the step before."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from engine_harness import Harness
from tiny_models import tiny_model

import engine.core.step_loop as step_loop
from engine.bench.profile_ops import count_ops
from engine.config import EngineConfig
from engine.core.runner import Runner


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen3_5_moe", qwen_seed=4)


def _runner(model) -> Runner:
    runner = Runner(model, EngineConfig(max_num_seqs=6, num_pages=16, page_size=4))
    rng = np.random.default_rng(0)
    for layer in runner.cache.states:
        for i, arr in enumerate(layer):
            layer[i] = mx.array(rng.normal(size=arr.shape).astype(np.float32)).astype(arr.dtype)
    mx.eval(runner.cache.arrays())
    return runner


def _states(runner) -> list[np.ndarray]:
    return [np.array(a.astype(mx.float32)) for layer in runner.cache.states for a in layer]


@pytest.mark.parametrize("pairs", [[(0, 3), (1, 4), (2, 5)],       # batched
                                   [(0, 3), (3, 4)],                # a chain: in order
                                   [(0, 3), (1, 3)],                # one destination twice
                                   [(2, 5)]])
def test_the_copies_leave_what_one_by_one_copies_leave(model, pairs):
    batched, one_by_one = _runner(model), _runner(model)
    batched.copy_state_slots(pairs)
    for src, dst in pairs:
        one_by_one.copy_state_slot(src, dst)
    for got, want in zip(_states(batched), _states(one_by_one)):
        np.testing.assert_array_equal(got, want)


def test_the_copies_graph_does_not_grow_with_the_copies(model):
    """The deterministic signature of the instantiates it avoids on CUDA."""
    counts = []
    for k in (1, 2, 3):
        runner = _runner(model)
        runner.copy_state_slots([(i, 3 + i) for i in range(k)])
        counts.append(count_ops(*runner.cache_arrays()))
    assert counts[0] == counts[1] == counts[2] > 0


def test_on_cuda_the_copies_are_queued_before_the_forward(model, monkeypatch):
    """With draws_apart (CUDA), a step that copies states evaluates the cache right after
    the copies, before its forward is built."""
    h = Harness(model, max_num_seqs=4, prefill_chunk=8, fixed_shapes=True,
                pipeline_steps=True)
    h.loop.draws_apart = True
    runner, events = h.loop.runner, []
    copy, forward = runner.copy, runner.decode

    def copy_and_note(copies):
        events.append(("copy", len(copies.states)))
        return copy(copies)
    runner.copy = copy_and_note
    runner.decode = lambda seqs: events.append(("decode", len(seqs))) or forward(seqs)
    queue = step_loop.mx.async_eval
    cache_ids = lambda: {id(a) for a in runner.cache_arrays()}           # noqa: E731

    def async_eval(*arrays):
        flat = [a for x in arrays for a in (x if isinstance(x, list) else [x])]
        if cache_ids() <= {id(a) for a in flat} and len(flat) == len(cache_ids()):
            events.append(("cache alone", 0))
        return queue(*arrays)
    monkeypatch.setattr(step_loop.mx, "async_eval", async_eval)
    rng = np.random.default_rng(3)
    h.run({0: [(i, rng.integers(0, 320, 5 + i).tolist(), 4) for i in range(3)]})
    snapshot_steps = [i for i, e in enumerate(events) if e[0] == "copy" and e[1] > 0]
    assert snapshot_steps, events                  # the prompts' ends were snapshotted
    for i in snapshot_steps:
        assert events[i + 1] == ("cache alone", 0), events[i:i + 3]
