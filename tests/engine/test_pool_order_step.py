"""A decode step's in-place pool writes ordered once (kernels/pool_order.py), through the
real Runner: stand-in launches (kernels/stand_in.py) build the GPU step's graph on any
machine, and evaluating it for a few steps, plain and compiled, is what would fail if a
settled pool were left out of the cache or traced wrongly."""
from __future__ import annotations

import io
import re

import mlx.core as mx
import pytest

from engine.bench import profile_ops
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.sequence import Sequence
from kernels.stand_in import gpu_graph


def _producers(arrays: list[mx.array]) -> set[str]:
    """The graph nodes that produce `arrays` (export_to_dot's sinks' producers)."""
    dot = io.StringIO()
    mx.export_to_dot(dot, *arrays)
    text = dot.getvalue()
    sinks = re.findall(r'\{ rank=sink; "(\w+)"; \}', text)
    assert len(sinks) == len(arrays)
    return {re.search(rf'(\d+) -> "{name}"', text).group(1) for name in sinks}


def _rows(n: int) -> list[Sequence]:
    seqs = []
    for i in range(n):
        s = Sequence(i, list(range(32)), None)
        s.pages, s.slot, s.num_computed = list(range(1 + 4 * i, 5 + 4 * i)), i, 31
        seqs.append(s)
    return seqs


@pytest.mark.parametrize("compile_decode", [False, True])
def test_decode_steps_with_pools_ordered_once_evaluate(compile_decode):
    model = profile_ops.counted_model(profile_ops.qwen3_5_layout(4), "gpu")
    runner = Runner(model, EngineConfig(max_num_seqs=2, page_size=16, num_pages=64,
                                        compile_decode=compile_decode))
    mx.eval(runner.cache_arrays())
    seqs = _rows(2)
    with gpu_graph():
        for _ in range(3):
            logits = runner.decode(seqs)
            # every pool of the step (each written by a launch: K/V, conv and recurrent
            # states) comes out of ONE node, the forward's Depends
            assert len(_producers(runner.cache_arrays())) == 1
            mx.eval(logits, *runner.cache_arrays())
            for s in seqs:
                s.output_ids.append(1)
                s.num_computed += 1
    assert logits.shape[0] == 2
