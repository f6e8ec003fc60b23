"""engine/loading/cuda_qmm_guard.py: MLX's CUDA quantized matmul with one group along K.

Two parts. On any machine: the guard swaps exactly the layers with K <= group size for
dense twins that compute what the quantized layer computes (checked on the CPU against
the quantized op itself, to float32 rounding over K). On CUDA only: the MLX bug the
guard exists for, as a strict xfail, so the day MLX fixes it this test fails and says
that the guard can go.
"""
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from float32_tolerance import assert_close

from engine.loading import cuda_qmm_guard
from kernels.backend import gpu_backend


class _Tiny(nn.Module):
    """One layer the bug takes (K = 64 = group) beside one it does not (K = 128)."""

    def __init__(self):
        super().__init__()
        self.narrow = nn.Linear(64, 96, bias=True)     # K = 64: one group of 64
        self.wide = nn.Linear(128, 64, bias=False)     # K = 128: two groups
        self.embed = nn.Embedding(50, 64)               # as_linear: K = 64


def _quantized(seed=0) -> _Tiny:
    mx.random.seed(seed)
    model = _Tiny()
    nn.quantize(model, group_size=64, bits=4)
    return model


def test_only_layers_with_one_group_along_k_become_dense():
    model = _quantized()
    assert cuda_qmm_guard.apply(model, force=True) == 2
    assert isinstance(model.narrow, nn.Linear) and not isinstance(model.narrow,
                                                                   nn.QuantizedLinear)
    assert isinstance(model.embed, nn.Embedding)
    assert isinstance(model.wide, nn.QuantizedLinear)


def test_off_cuda_nothing_is_replaced():
    if cuda_qmm_guard.needs_guard():
        pytest.skip("this machine runs MLX's CUDA backend")
    model = _quantized()
    assert cuda_qmm_guard.apply(model) == 0
    assert isinstance(model.narrow, nn.QuantizedLinear)


def test_the_dense_twins_compute_what_the_quantized_layers_do(cpu_stream):
    model, twin = _quantized(), _quantized()
    cuda_qmm_guard.apply(twin, force=True)
    x = mx.random.normal((4, 3, 64), key=mx.random.key(1))
    ids = mx.array([[0, 7, 49]])
    # one reduction of K = 64 products, in a different order: depth 64 roundings
    assert_close(twin.narrow(x), model.narrow(x), 64, "narrow linear")
    assert_close(twin.embed.as_linear(x), model.embed.as_linear(x), 64, "tied head")
    np.testing.assert_array_equal(np.array(twin.embed(ids)), np.array(model.embed(ids)))


def test_a_planted_fault_in_a_twin_is_caught(cpu_stream):
    model, twin = _quantized(), _quantized()
    cuda_qmm_guard.apply(twin, force=True)
    twin.narrow.weight = twin.narrow.weight + mx.eye(96, 64) * 0.5
    x = mx.random.normal((4, 64), key=mx.random.key(1))
    with pytest.raises(AssertionError):
        assert_close(twin.narrow(x), model.narrow(x), 64, "narrow linear")


@pytest.mark.skipif(gpu_backend() != "cuda", reason="MLX's CUDA backend only")
@pytest.mark.xfail(strict=True, reason="MLX 0.32.4 CUDA: quantized_matmul with one group "
                   "along K and several rows is wrong; when this passes, drop cuda_qmm_guard")
@pytest.mark.parametrize("rows, k", [(4, 64), (4, 128)])
def test_mlx_cuda_quantized_matmul_with_one_group_along_k(rows, k):
    x = mx.random.normal((rows, k), key=mx.random.key(0))
    w = mx.random.normal((128, k), key=mx.random.key(1)) / k ** 0.5
    q = mx.quantize(w, group_size=k, bits=4)
    on_gpu = mx.quantized_matmul(x, *q, transpose=True, group_size=k, bits=4)
    on_cpu = mx.quantized_matmul(x, *q, transpose=True, group_size=k, bits=4, stream=mx.cpu)
    assert_close(on_gpu, on_cpu, k, "GPU against CPU")


# Bug 2: MLX's CUDA qmm_sm80 (bf16/f16, N % 128 == 0) reads a K tile past x and w where K
# fits in one tile of max(64, group). The guard's and the experts' predicate:
def test_qmm_sm80_reads_past_k_only_with_k_in_one_tile_and_its_conditions():
    from engine.models.moe import reads_past_k
    bf16, f16, f32 = mx.bfloat16, mx.float16, mx.float32
    assert reads_past_k(64, 128, 64, bf16) and reads_past_k(64, 256, 32, f16)
    assert reads_past_k(128, 128, 128, bf16)               # one tile of 128
    assert not reads_past_k(128, 128, 64, bf16)            # two tiles of 64
    assert not reads_past_k(2048, 512, 64, bf16)           # the real model's shapes
    assert not reads_past_k(512, 2048, 64, bf16)
    assert not reads_past_k(64, 96, 64, bf16)              # N % 128: not qmm_sm80's
    assert not reads_past_k(64, 128, 64, f32)              # float32: qmm_naive's


def _experts(k=64, n=128, e=4, seed=0):
    kw, kx = mx.random.split(mx.random.key(seed))
    w = (mx.random.normal((e, n, k), key=kw) / k ** 0.5).astype(mx.bfloat16)
    x = mx.random.normal((12, 1, k), key=kx).astype(mx.bfloat16)
    idx = mx.array([3, 0, 1, 3, 2, 2, 0, 1, 3, 3, 0, 2], dtype=mx.uint32)
    return x, mx.quantize(w, group_size=64, bits=4), idx


def _plain(x, q, idx, sorted_indices=False):
    return mx.gather_qmm(x, *q, rhs_indices=idx, transpose=True, group_size=64, bits=4,
                         sorted_indices=sorted_indices)


@pytest.mark.parametrize("sorted_indices", [False, True])
def test_gathered_qmm_around_qmm_sm80_gives_the_quantized_products(monkeypatch,
                                                                   sorted_indices):
    """The route (dequantize in float32, gather_mm unsorted) against gather_qmm on the same
    bf16 inputs widened to float32: one float32 reduction over K, then one bf16 rounding."""
    from float32_tolerance import tolerance

    import engine.models.moe as moe
    x, q, idx = _experts()
    if sorted_indices:
        idx = mx.sort(idx)
    monkeypatch.setattr(moe, "_QMM_READS_PAST_ONE_K_TILE", True)
    got = moe.gathered_qmm(x, *q, None, idx, 64, 4, "affine", sorted_indices)
    assert got.dtype == mx.bfloat16
    want = np.array(_plain(x.astype(mx.float32), (q[0], q[1].astype(mx.float32),
                                                   q[2].astype(mx.float32)), idx))
    err = np.abs(np.array(got.astype(mx.float32)) - want)
    assert (err <= 2.0 ** -8 * np.abs(want) + tolerance(want, 64)).all(), err.max()
    monkeypatch.setattr(moe, "_QMM_READS_PAST_ONE_K_TILE", False)       # off CUDA
    np.testing.assert_array_equal(
        np.array(moe.gathered_qmm(x, *q, None, idx, 64, 4, "affine", sorted_indices)
                 .astype(mx.float32)),
        np.array(_plain(x, q, idx, sorted_indices).astype(mx.float32)))


def test_mlx_lms_expert_layers_that_qmm_sm80_reads_past_go_around_it(monkeypatch):
    """The guard swaps mlx-lm's quantized expert layers of such K (a reference model, the
    bench's peer) for GuardedSwitchLinear: the same call and the same arrays. Wider ones,
    and ours (which route themselves), stay."""
    switch_layers = pytest.importorskip("mlx_lm.models.switch_layers")
    from engine.models.moe import QuantizedSwitchLinear as Ours

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.narrow = switch_layers.QuantizedSwitchLinear(64, 128, 4, bias=True)
            self.wide = switch_layers.QuantizedSwitchLinear(128, 128, 4, bias=False)
            self.ours = Ours(64, 128, 4)

    model = Experts()
    model.narrow.bias = mx.random.normal((4, 128), key=mx.random.key(7))
    model.set_dtype(mx.bfloat16)
    x, _, idx = _experts()
    before = model.narrow(x, idx)
    assert cuda_qmm_guard.apply(model, force=True) == 1
    assert isinstance(model.narrow, cuda_qmm_guard.GuardedSwitchLinear)
    assert isinstance(model.wide, switch_layers.QuantizedSwitchLinear)
    assert isinstance(model.ours, Ours)
    import engine.models.moe as moe
    monkeypatch.setattr(moe, "_QMM_READS_PAST_ONE_K_TILE", False)      # gather_qmm itself
    np.testing.assert_array_equal(np.array(model.narrow(x, idx).astype(mx.float32)),
                                  np.array(before.astype(mx.float32)))
