"""Every custom-kernel instance the app's workload meets, the warm-up met first.

On CUDA a kernel instance a step meets for the first time compiles inside that step (NVRTC,
~1 s; MLX keeps no custom kernel on disk), and py-spy on the H200 found 130 samples of it
in the concurrency bench's steps (session 21). Counted without a GPU: the kernels launch as
stand-ins (kernels/stand_in.py), each recording its instance (what MLX compiles one module
for), while the warm-up runs and then while streams are admitted and decode and a long
prompt is read in chunks beside them, sampled at the app's settings."""
from __future__ import annotations

import pytest

from engine.bench.counted_model import counted_model
from engine.bench.profile_ops import qwen3_5_layout
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.sampler import RowSampler, sample_batch
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.core.warm_up import _run_shape, sampled_warm_up, warm_up_shapes
from engine.sampling_params import SamplingParams
from engine.settings_spec import chat_defaults
from kernels.kernel_set import KernelSet
from kernels.stand_in import COUNT, gpu_graph

# A GPU's defaults (fixed shapes, compiled decode, two forwards beside streams) at the
# concurrency bench's sizes; a 4-layer slice of the hybrid MoE layout at toy widths.
CONFIG = EngineConfig(max_num_seqs=8, page_size=16, num_pages=700, prefill_chunk=512,
                      max_context=6144, fixed_shapes=True, compile_decode=True,
                      prefix_cache=False)


def _seq(i: int, n: int, first_page: int) -> Sequence:
    s = Sequence(i, [3 + (i * 7 + j) % 40 for j in range(n)])
    s.pages = list(range(first_page, first_page + n // 16 + 24))
    s.slot, s.prefill_target = i, n
    return s


def _workload(runner: Runner) -> None:
    """Seven streams admitted (prompts of 40-300 tokens, alone and two at once), decoding
    at growing batches, a 2,048-token prompt read in chunks of every length beside them
    (two forwards, as on a GPU by default), every step sampled at the app's settings."""
    settings = chat_defaults()
    app = SamplingParams(temperature=settings["temperature"], top_p=settings["top_p"])
    streams = [_seq(i, n, 1 + 48 * i) for i, n in enumerate((40, 120, 300, 40, 120, 300, 40))]
    runner.prefill([PrefillChunk(s, 0, len(s.prompt_ids)) for s in streams[:2]])
    for s in streams[2:]:
        runner.prefill([PrefillChunk(s, 0, len(s.prompt_ids))])
    for s in streams:
        s.num_computed = len(s.prompt_ids)
    samplers = [RowSampler(app) for _ in streams]
    kernels = KernelSet(COUNT)
    for b in (1, 2, 3, 5, 7):
        for s in streams[:b]:
            s.output_ids.append(5)
        sample_batch(runner.decode(streams[:b]), samplers[:b], kernels)
    new, start = _seq(9, 2048, 400), 0
    for n in (16, 32, 64, 128, 256, 512, 512, 400, 128):
        sample_batch(runner.decode(streams), samplers, kernels)
        runner.prefill([PrefillChunk(new, start, n)])
        start += n


@pytest.mark.parametrize("with_sampler", [True, False])
def test_the_warm_up_meets_every_kernel_instance_a_workload_meets(with_sampler):
    runner = Runner(counted_model(qwen3_5_layout(4), "gpu"), CONFIG)
    with gpu_graph() as warm:                # graphs built, never run: nothing computes
        for shape in warm_up_shapes(CONFIG):
            _run_shape(runner, shape)
        if with_sampler:
            sampled_warm_up(runner)
    with gpu_graph() as work:
        _workload(runner)
    missing = {inst[0] for inst in work.instances - warm.instances}
    assert work.instances and warm.instances
    if with_sampler:
        assert missing == set()
    else:                                   # the rule's own check: without it, the
        assert missing == {"top_p_cut", "cdf_draw"}  # first sampled step compiled them
