
import kernel_gdn_cases as gdn_cases
import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.gated_delta_step as gds
from kernels.kernel_set import KernelSet

# (B, Hk, Hv, D, S): B=1 and B>1, grouped (Hv = 2*Hk, 4*Hk) and not, pool bigger than B
GRID = [(1, 2, 2, 32, 3), (4, 2, 4, 32, 7), (3, 1, 4, 64, 5), (5, 4, 8, 128, 9)]
DTYPES = [mx.float32, mx.bfloat16]


def _step_args(m):
    """Drop the T axis: the step takes q, k [B, Hk, Dk], v [B, Hv, Dv], g, beta [B, Hv]."""
    return (m["q"][:, 0], m["k"][:, 0], m["v"][:, 0], m["g"][:, 0], m["beta"][:, 0],
            m["pool"], m["slots"], m["fresh"])


def _check(y, rows, n, dtype):
    ny, nst = numpy_ref.gdn(n["q"], n["k"], n["v"], n["g"], n["beta"], n["state0"],
                            n["lengths"])
    s_atol, y_atol, y_rtol = gdn_cases.tolerances(dtype)
    assert numpy_ref.close(to_np(rows), nst, s_atol)
    assert numpy_ref.close(to_np(y), ny[:, 0], y_atol, y_rtol)
    return ny[:, 0], nst


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(shape, dtype, cpu_stream):
    m, n = gdn_cases.make(0, *shape[:1], 1, *shape[1:], dtype=dtype)
    _check(*gds.reference(*_step_args(m)), n, dtype)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lanes", [4, 8, 32])
def test_kernel_matches_numpy(backend, shape, dtype, lanes):
    m, n = gdn_cases.make(1, *shape[:1], 1, *shape[1:], dtype=dtype)
    if not gds.applies(*_step_args(m)[:3], m["pool"], lanes):
        pytest.skip("shape outside the kernel's contract for these lanes")
    before = np.array(m["pool"])
    y = gds.kernel(*_step_args(m), backend=backend, lanes=lanes)
    mx.eval(y)                                   # the pool is rewritten in place
    _check(y, m["pool"][m["slots"]], n, dtype)
    others = np.setdiff1d(np.arange(shape[-1]), n["slots"])
    assert np.array_equal(to_np(m["pool"])[others], before[others])


def test_kernel_writes_through_a_strided_pool(backend):
    """The pool may be a view (slot axis strided): writes land in the parent array."""
    m, n = gdn_cases.make(5, 3, 1, 2, 4, 32, 5, mx.float32)
    big = mx.stack([mx.zeros_like(m["pool"]), m["pool"]], axis=1)   # [S, 2, Hv, Dv, Dk]
    mx.eval(big)
    args = list(_step_args(m))
    args[5] = big[:, 1]
    y = gds.kernel(*args, backend=backend)
    mx.eval(y)
    _check(y, big[:, 1][m["slots"]], n, mx.float32)
    assert not np.any(to_np(big[:, 0]))


def test_dispatcher_writes_pool_in_place(backend):
    """Rows land at their slots; every other slot keeps its state."""
    m, n = gdn_cases.make(2, 4, 1, 2, 4, 32, 7, mx.float32)
    before = np.array(m["pool"])
    y, pool = KernelSet(backend).gated_delta_step(*_step_args(m))
    mx.eval(y, pool)                             # evaluate before reading rows (contract)
    _, nst = _check(y, pool[m["slots"]], n, mx.float32)
    after = to_np(pool)
    others = np.setdiff1d(np.arange(7), n["slots"])
    assert np.array_equal(after[others], before[others])
    assert numpy_ref.close(after[n["slots"]], nst, 2e-4)


def _planted(y_actual, n):
    bad = np.array(to_np(y_actual))
    bad[0, 0] += 1.0                                     # one row of the output off by one
    ny, _ = numpy_ref.gdn(n["q"], n["k"], n["v"], n["g"], n["beta"], n["state0"], n["lengths"])
    return numpy_ref.close(bad, ny[:, 0], *gdn_cases.tolerances(mx.bfloat16)[1:])


def test_planted_fault_is_caught_reference():
    m, n = gdn_cases.make(4, 3, 1, 2, 4, 32, 5, mx.bfloat16)
    assert not _planted(gds.reference(*_step_args(m))[0], n)


def test_planted_fault_is_caught_kernel(backend):
    m, n = gdn_cases.make(4, 3, 1, 2, 4, 32, 5, mx.bfloat16)
    assert not _planted(gds.kernel(*_step_args(m), backend=backend), n)


@pytest.mark.parametrize("shape", GRID)
def test_picked_lanes_fit_the_shape(shape):
    B, Hk, Hv, D, S = shape
    lanes = gds.pick_lanes(D, D)
    assert gds.applies(mx.zeros((B, Hk, D)), mx.zeros((B, Hk, D)), mx.zeros((B, Hv, D)),
                       mx.zeros((S, Hv, D, D)), lanes)
