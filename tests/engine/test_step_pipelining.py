"""Where the step loop pipelines (EngineConfig.pipeline_steps; None: on a GPU only).

Pipelined, step n+1 is queued before step n is read back: the device works while the
host builds the next step, and each token reaches its stream one step later. On MLX's CPU
backend the queuing itself runs the step (async_eval returns with ~10 ops left), so
there is nothing to overlap and only the step of latency is left: a new prompt's first
token beside 3 streams came 0.2-0.3 s later on a 2-core CPU (docs/PERFORMANCE.md, issue
21). The signature, without timing: what the host holds of each row when the next step
is queued.
"""
from __future__ import annotations

import mlx.core as mx
from engine_harness import Harness
from tiny_models import tiny_llama

from engine.config import EngineConfig
from engine.core.step_loop import pipelines_steps


def _host_tokens_at_each_decode(pipeline: bool | None) -> list[list[int]]:
    """Tokens each row has on the host (not pending on the device) as each decode step
    is queued, for two rows generating 5 tokens each."""
    h = Harness(tiny_llama(), pipeline_steps=pipeline)
    seen = []
    decode = h.loop.runner.decode

    def record(seqs):
        seen.append([len(s.output_ids) for s in seqs])
        return decode(seqs)
    h.loop.runner.decode = record
    h.run({0: [(0, [5, 6, 7], 5), (1, [8, 9], 5)]})
    assert [len(h.seqs[r].output_ids) for r in (0, 1)] == [5, 5]
    return seen


def test_unpipelined_each_step_is_read_before_the_next_is_queued():
    """Every token is on the host (handed to its stream) before the next step is queued."""
    assert _host_tokens_at_each_decode(False) == [[1, 1], [2, 2], [3, 3], [4, 4]]


def test_pipelined_the_next_step_is_queued_before_the_last_token_is_read():
    """The previous step's token is still on the device when the next step is queued,
    and a row that ended there costs that next step a wasted row (here a whole step)."""
    assert _host_tokens_at_each_decode(True) == [[0, 0], [1, 1], [2, 2], [3, 3], [4, 4]]


def test_pipelining_is_the_gpus_unless_set():
    on_gpu = mx.default_device().type == mx.DeviceType.gpu
    assert pipelines_steps(EngineConfig()) is on_gpu
    assert pipelines_steps(EngineConfig(pipeline_steps=True)) is True
    assert pipelines_steps(EngineConfig(pipeline_steps=False)) is False
