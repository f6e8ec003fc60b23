"""The step loop samples with its model's kernel set (kernels/top_p_cut on a GPU): a
dropped argument would silently bring the 31-step bisection back on every GPU step."""
from engine_harness import Harness, _NoDetok
from tiny_models import tiny_llama

import kernels.top_p_cut as tpc
from engine.core import sampler
from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request
from engine.models.base import use_kernels
from engine.sampling_params import SamplingParams
from kernels.backend import NAMES
from kernels.kernel_set import KernelSet


def test_the_step_loop_samples_with_its_models_kernel_set(monkeypatch):
    calls = []
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: calls.append(backend)
                        or tpc.reference(*a))
    model = tiny_llama()
    use_kernels(model, KernelSet("cuda", tuple((n, "test") for n in NAMES if n != tpc.NAME)))
    h = Harness(model)
    prompt = [1, 2, 3, 4, 5]
    params = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=4, seed=3)
    stream = OutputStream(_NoDetok(), frozenset(), params, h.config.max_context)
    h.loop.add(Request(Sequence(1, prompt), RowSampler(params, prompt), stream))
    h.run()
    # the first token and each decode; on a GPU the sampling graph is compiled, and the
    # kernel is called while it is traced: once a batch shape (engine/core/sampler.py)
    assert len(calls) >= (1 if sampler._on_gpu() else 4) and set(calls) == {"cuda"}
