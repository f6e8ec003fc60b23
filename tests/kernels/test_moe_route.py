
import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.moe_route as mr
from kernels.kernel_set import KernelSet

# (N, E, k): one token and many, the real 256/8 and smaller
GRID = [(1, 256, 8), (7, 256, 8), (33, 64, 4), (5, 128, 1), (4, 32, 32)]
DTYPES = [mx.float32, mx.bfloat16]


def _make(seed, N, E, dtype):
    rng = np.random.default_rng(seed)
    # distinct logits so the top-k set is unique even after bf16 rounding
    logits = np.stack([rng.permutation(E) for _ in range(N)]) * (4.0 / E) + rng.normal(0, 1e-3)
    m = mx.array(logits, dtype=dtype)
    return m, to_np(m)


def _check(idx, w, nl, k, normalize):
    nidx, nw = numpy_ref.moe_route(nl, k, normalize)
    assert np.array_equal(to_np(idx), nidx)
    assert numpy_ref.close(to_np(w), nw, 1e-5, 1e-4)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("normalize", [True, False])
def test_reference_matches_numpy(case, dtype, normalize, cpu_stream):
    N, E, k = case
    m, nl = _make(0, N, E, dtype)
    _check(*mr.reference(m, k, normalize), nl, k, normalize)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("normalize", [True, False])
def test_kernel_matches_numpy(backend, case, dtype, normalize):
    N, E, k = case
    m, nl = _make(1, N, E, dtype)
    _check(*mr.kernel(m, k, normalize, backend=backend), nl, k, normalize)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_reads_a_column_slice_of_a_wider_row_as_it_is(backend, dtype):
    """The model hands over the router's columns of a joined output row (the shared
    gate's column beside them): read through its strides, no copy; and a transposed view
    (column stride > 1) as well."""
    m, nl = _make(3, 16, 256, dtype)
    wide = mx.concatenate([m, mx.ones((16, 1), dtype)], axis=1)          # [16, 257]
    _check(*mr.kernel(wide[:, :256], 8, True, backend=backend), nl, 8, True)
    _check(*mr.kernel(mx.contiguous(m.T).T, 8, True, backend=backend), nl, 8, True)


def test_dispatcher_matches_numpy(backend):
    m, nl = _make(2, 9, 256, mx.bfloat16)
    _check(*KernelSet(backend).moe_route(m, 8), nl, 8, True)


def _fault_caught(w, nl):
    bad = np.array(to_np(w))
    bad[0] += 1.0
    return not numpy_ref.close(bad, numpy_ref.moe_route(nl, 8, True)[1], 1e-5, 1e-4)


def test_planted_fault_is_caught_reference():
    m, nl = _make(3, 4, 256, mx.float32)
    assert _fault_caught(mr.reference(m, 8)[1], nl)


def test_planted_fault_is_caught_kernel(backend):
    m, nl = _make(3, 4, 256, mx.float32)
    assert _fault_caught(mr.kernel(m, 8, backend=backend)[1], nl)
