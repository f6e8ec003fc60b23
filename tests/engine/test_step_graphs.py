"""On CUDA a step with prompt work queues the decode rows' draw, the chunk's forward (or
piece) and the prompts' draws apart (StepLoop.draws_apart). MLX's CUDA backend keeps one
graph exec per graph shape and instantiates one on each miss (docs/RELIABILITY.md): queued
as one, every pairing of the rows' sampling settings with a
chunk's layout was a graph of its own. The signature, on any machine: no graph such a
step evaluates holds both a draw (an ArgReduce: the rows here are greedy) and the
model's layers (a matrix product)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from engine_harness import Harness
from tiny_models import tiny_model

from engine.bench.step_graphs import StepGraphs
from engine.core.chunk_pieces import on_cuda
from engine.core.step_loop import StepLoop

RNG = np.random.default_rng(7)
STREAMS = [RNG.integers(0, 320, n).tolist() for n in (9, 5, 13)]
LATER = RNG.integers(0, 320, 21).tolist()       # read beside the streams
GPU_LIKE = {"fixed_shapes": True, "pipeline_steps": True}


def _graphs_of_steps_with_prompt_work(pieces: int, apart: bool) -> list[list[str]]:
    """The op names of every distinct graph evaluated by a step that ran decode rows and
    prompt work together (three greedy streams, a 21-token prompt arriving at step 4)."""
    h = Harness(tiny_model("qwen3_5_moe", qwen_seed=4), max_num_seqs=4, prefill_chunk=8,
                chunk_pieces=pieces, mixed_forward=False, **GPU_LIKE)
    h.loop.draws_apart = apart                  # CUDA's setting, tested on any machine
    with StepGraphs() as graphs:
        h.run({0: [(i, p, 12) for i, p in enumerate(STREAMS)], 4: [(3, LATER, 6)]})
    return [graphs.ops[key] for key, (_, kind) in graphs.first.items()
            if kind in ("chunk beside decode", "chunk in pieces")]


def _has_layers(graph: list[str]) -> bool:
    return any("Matmul" in op or "QMM" in op for op in graph)


@pytest.mark.parametrize("pieces", [1, 4])
def test_a_draw_and_the_layers_are_never_one_graph(pieces):
    graphs = _graphs_of_steps_with_prompt_work(pieces, apart=True)
    draws = [g for g in graphs if "ArgReduce" in g]
    assert draws and [g for g in graphs if _has_layers(g)]   # such steps ran, both in them
    assert not [g for g in draws if _has_layers(g)]


def test_elsewhere_they_stay_one_graph():
    """Off (the CPU's and Metal's default: on the CPU the split cost a prompt beside
    streams ~8 %), the rows' draw rides with the chunk's layers: what the split changes.
    On by default only on CUDA."""
    assert Harness(tiny_model("qwen3_5_moe", qwen_seed=4)).loop.draws_apart is on_cuda()
    graphs = _graphs_of_steps_with_prompt_work(4, apart=False)
    assert [g for g in graphs if "ArgReduce" in g and _has_layers(g)]


def test_the_counter_counts_each_distinct_graph_once_and_puts_everything_back():
    async_eval = mx.async_eval
    x = mx.ones((4,))
    mx.eval(x)
    with StepGraphs() as graphs:
        for make in (lambda: x + 1, lambda: x * 2, lambda: x + 3):   # + twice: one graph
            out = make()
            mx.async_eval(out)
            mx.eval(out)
        mx.async_eval(out)                      # evaluated already: nothing to run
    assert mx.async_eval is async_eval and StepLoop._run.__name__ == "_run"
    got = graphs.summary(60.0)
    assert got["distinct"] == 2 and got["by_kind"] == {"other": 2}
