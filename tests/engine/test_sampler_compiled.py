"""The sampling graph through mx.compile (what a GPU runs: engine/core/sampler.py,
`_compiled_draw`) against the same graph uncompiled, on this CPU.

Both evaluate the same float32 ops; fusing only changes where intermediate values live,
so a kept set is the same and a weight differs by float32 rounding at most. The bound:
d = (logit - max) / t is one subtraction and one division either way; the weight
2**(d * log2 e) then carries a relative error of |d| * log2(e) * ln 2 = |d| times d's
own (<= 2 ulp: 2**-23 relative), plus the power's and the product's (2 ulp) -- so
|w_c - w_p| <= w_p * (|d| + 2) * 2**-22. Draws use fixed keys away from any id's
boundary, so compiled and plain draw the same ids. Against the float64 reference, the
compiled draws are checked in test_sampler_exact.py (parametrized).
"""
import gc

import mlx.core as mx
import numpy as np
import pytest

from engine.core import sampler
from engine.core.sampler import RowSampler, _kept_weights, sample, sample_batch
from engine.core.sampling_rows import RowSettings
from engine.sampling_params import SamplingParams

EPS = 2.0 ** -22   # 2 float32 ulps (the unit of the bound above)


def _batch(rng, rows: int) -> list[SamplingParams]:
    """A mixed batch: greedy rows, top-k, top-p alone (by mass), min-p, plain draws."""
    out = []
    for _ in range(rows):
        out.append(SamplingParams(temperature=float(rng.choice([0.0, 0.5, 0.7, 1.3])),
                                  top_k=int(rng.choice([0, 0, 1, 4, 40])),
                                  top_p=float(rng.choice([1.0, 0.5, 0.95])),
                                  min_p=float(rng.choice([0.0, 0.0, 0.05]))))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_compiled_kept_weights_are_the_plain_ones_to_float32_rounding(seed):
    rng = np.random.default_rng(seed)
    logits = mx.array((rng.standard_normal((8, 300)) * 3).astype(np.float32))
    rows = RowSettings.of(_batch(rng, 8), 300)
    plain = np.array(_kept_weights(logits, rows.arrays, rows.shape))
    fused = np.array(mx.compile(lambda x: _kept_weights(x, rows.arrays, rows.shape))(logits))
    np.testing.assert_array_equal(fused > 0, plain > 0)             # the same kept sets
    temps = np.array(rows.arrays["temps"])
    d = np.abs((np.array(logits) - np.array(logits).max(-1, keepdims=True)) / temps)
    assert np.all(np.abs(fused - plain) <= plain * (d + 2) * EPS)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_sampling_draws_the_plain_graphs_ids(seed):
    rng = np.random.default_rng(100 + seed)
    params = _batch(rng, 16)
    logits = mx.array((rng.standard_normal((16, 500)) * 2).astype(np.float32))
    keys = mx.random.split(mx.random.key(seed), 16)
    plain = np.array(sample(logits, params, keys=keys, compiled=False))
    fused = np.array(sample(logits, params, keys=keys, compiled=True))
    np.testing.assert_array_equal(fused, plain)
    greedy = np.array([p.greedy for p in params])
    assert greedy.any() and not greedy.all()               # a mixed batch
    np.testing.assert_array_equal(fused[greedy], np.array(mx.argmax(logits, -1))[greedy])


def test_one_compiled_function_per_graph_shape_and_none_kept_for_a_dropped_kernel_set():
    class Kernels:          # a kernel set that launches nothing (the plain cut and draw)
        def top_p_cut(self, key, weights, target):
            return None

        def cdf_draw(self, kept, u):
            return None

    kernels = Kernels()
    app = [RowSampler(SamplingParams(temperature=0.7, top_p=0.95)) for _ in range(2)]
    before = dict(sampler._COMPILED)
    for _ in range(3):
        sample_batch(mx.zeros((2, 64)), app, kernels, compiled=True)
    mine = [k for k in sampler._COMPILED if k not in before]
    assert len(mine) == 1                                  # reused, step after step
    top_k = [RowSampler(SamplingParams(temperature=0.7, top_k=5))]
    sample_batch(mx.zeros((1, 64)), top_k, kernels, compiled=True)
    assert len([k for k in sampler._COMPILED if k not in before]) == 2   # another shape
    del kernels
    gc.collect()
    assert dict(sampler._COMPILED) == before               # dropped with its kernel set
