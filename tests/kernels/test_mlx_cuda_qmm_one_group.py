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
