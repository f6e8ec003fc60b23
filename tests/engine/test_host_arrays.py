"""A step makes few arrays from host values (engine/core/host_arrays.py): on MLX's CUDA
backend each may reuse a freed device buffer and cost a blocking copy to unified memory
(10 % of the engine thread's step time in the H200's concurrency bench, session 21).
Counted without a GPU: every array a step's modules make from host values."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from tiny_models import tiny_llama

from engine.config import EngineConfig
from engine.core import host_arrays
from engine.core import runner as runner_module
from engine.core import sampler as sampler_module
from engine.core.runner import Runner
from engine.core.sampler import RowSampler, sample_batch
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.sampling_params import SamplingParams

APP = SamplingParams(temperature=0.7, top_p=0.95)     # the app's chat defaults


class _Counter:
    made = 0


class _ArrayMeta(type):
    """Stands in for mx.array in a module: counts constructions, passes isinstance."""
    def __instancecheck__(cls, obj):
        return isinstance(obj, mx.array)

    def __call__(cls, *args, **kwargs):
        _Counter.made += 1
        return mx.array(*args, **kwargs)


class _CountedArray(metaclass=_ArrayMeta):
    pass


class _Mx:
    array = _CountedArray

    def __getattr__(self, name):
        return getattr(mx, name)


@pytest.fixture
def made(monkeypatch):
    for module in (runner_module, sampler_module, host_arrays):
        monkeypatch.setattr(module, "mx", _Mx())
    def count(fn):
        _Counter.made = 0
        mx.eval(fn())
        return _Counter.made
    return count


def _rows(n: int, length: int, first_id: int) -> list[Sequence]:
    out = []
    for i in range(n):
        s = Sequence(first_id + i, [3 + (5 * i + j) % 40 for j in range(length)])
        s.pages, s.slot, s.prefill_target = list(range(1 + 8 * (first_id + i), 9 + 8 * (first_id + i))), first_id + i, length
        s.num_computed = length - 1
        out.append(s)
    return out


def _runner() -> Runner:
    return Runner(tiny_llama(), EngineConfig(max_num_seqs=8, page_size=4, num_pages=80,
                                             prefix_cache=False, prefill_chunk=16,
                                             fixed_shapes=True, compile_decode=False))


def test_a_decode_step_uploads_its_view_once(made):
    """Three rows padded to four: the view's six index arrays in one upload, the rows'
    token ids (host ids here; on a GPU the last step's, on the device) one more, the
    padding rows' routing none (made once)."""
    runner, streams = _runner(), _rows(3, 9, 0)
    runner.decode(streams)                                      # first: constants made
    assert made(lambda: runner.decode(streams)) == 2            # was 8


def test_a_mixed_step_uploads_one_view_per_group(made):
    runner, streams = _runner(), _rows(3, 9, 0)
    [prompt] = _rows(1, 12, 5)
    prompt.num_computed = 0
    chunk = [PrefillChunk(prompt, 0, 8)]
    runner.mixed(streams, chunk)
    assert made(lambda: runner.mixed(streams, chunk)) == 4     # two views, two token arrays (was 15)


def test_sampling_with_the_apps_settings_makes_no_array_after_the_first_step(made):
    """temperature, top-p and min-p columns and the greedy mask repeat every step."""
    logits = mx.random.normal((4, 97), key=mx.random.key(0))
    states = [RowSampler(APP) for _ in range(3)] + [RowSampler(SamplingParams(temperature=0))]
    sample_batch(logits, states)
    assert made(lambda: sample_batch(logits, states)) == 0      # was 5


def test_an_upload_gives_each_part_back_with_its_shape_and_values():
    parts = [np.array([3, 1]), np.arange(6).reshape(2, 3), np.array([[7]]), np.zeros((0,))]
    got = host_arrays.upload(parts)
    for part, array in zip(parts, got):
        assert array.shape == part.shape and array.dtype == mx.int32
        assert np.array_equal(np.array(array), part)


def test_a_constant_is_made_once_per_values_and_dtype():
    a = host_arrays.constant((0.7, 0.7), mx.float32)
    assert host_arrays.constant((0.7, 0.7), mx.float32) is a
    assert host_arrays.constant((0.7, 0.7), mx.bfloat16) is not a
    assert host_arrays.constant((0.7, 0.5), mx.float32) is not a
