import shutil

import kernel_gdn_cases as gdn_cases
import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.gated_delta_chunk as gdc
from kernels.kernel_set import KernelSet

# (B, T, Hk, Hv, D, S, lengths): T=1 and T>1, B=1 and B>1, grouped heads, ragged rows
GRID = [(1, 1, 2, 2, 32, 2, None), (1, 9, 2, 4, 32, 3, None), (3, 6, 1, 2, 64, 5, [6, 1, 3]),
        (4, 17, 2, 4, 128, 6, [17, 5, 1, 12]), (2, 4, 4, 8, 32, 4, [0, 4])]
DTYPES = [mx.float32, mx.bfloat16]


def _args(m):
    return (m["q"], m["k"], m["v"], m["g"], m["beta"], m["pool"], m["slots"], m["lengths"],
            m["fresh"])


def _numpy(n):
    return numpy_ref.gdn(n["q"], n["k"], n["v"], n["g"], n["beta"], n["state0"], n["lengths"])


def _check(y, rows, n, dtype):
    ny, nst = _numpy(n)
    s_atol, y_atol, y_rtol = gdn_cases.tolerances(dtype)
    # long chunks accumulate float32 rounding in the state; still far below any real bug
    s_atol *= max(1, y.shape[1] // 4)
    assert numpy_ref.close(to_np(rows), nst, s_atol)
    assert numpy_ref.close(to_np(y), ny, y_atol, y_rtol)


def _make(seed, case, dtype):
    B, T, Hk, Hv, D, S, lens = case
    return gdn_cases.make(seed, B, T, Hk, Hv, D, S, dtype, lengths=lens)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, dtype, cpu_stream):
    m, n = _make(0, case, dtype)
    _check(*gdc.reference(*_args(m)), n, dtype)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lanes", [8, 16, 32])
def test_kernel_matches_numpy(backend, case, dtype, lanes):
    m, n = _make(1, case, dtype)
    if not gdc.applies(m["q"], m["k"], m["v"], m["pool"], lanes):
        pytest.skip("shape outside the kernel's contract for these lanes")
    y = gdc.kernel(*_args(m), backend=backend, lanes=lanes)
    mx.eval(y)                                   # the pool is rewritten in place
    _check(y, m["pool"][m["slots"]], n, dtype)


def test_padded_tokens_leave_state_and_give_zero_reference():
    """A row of length 0 keeps its (possibly zeroed) state; padded y is exactly 0."""
    m, n = _make(2, (2, 4, 2, 4, 32, 4, [0, 2]), mx.float32)
    y, rows = gdc.reference(*_args(m))
    assert np.array_equal(to_np(rows)[0], n["state0"][0])
    assert not np.any(to_np(y)[0]) and not np.any(to_np(y)[1, 2:])


def test_padded_tokens_leave_state_and_give_zero_kernel(backend):
    m, n = _make(2, (2, 4, 2, 4, 32, 4, [0, 2]), mx.float32)
    y, pool = KernelSet(backend).gated_delta_chunk(*_args(m))
    mx.eval(y, pool)
    after = to_np(pool)
    assert np.array_equal(after[n["slots"][0]], n["state0"][0])
    assert not np.any(to_np(y)[0]) and not np.any(to_np(y)[1, 2:])


def test_dispatcher_writes_pool_in_place(backend):
    m, n = _make(3, (3, 5, 2, 4, 32, 6, [5, 2, 4]), mx.float32)
    before = np.array(m["pool"])
    y, pool = KernelSet(backend).gated_delta_chunk(*_args(m))
    mx.eval(y, pool)
    _, nst = _numpy(n)
    after = to_np(pool)
    others = np.setdiff1d(np.arange(6), n["slots"])
    assert np.array_equal(after[others], before[others])
    assert numpy_ref.close(after[n["slots"]], nst, 2e-4)


def _fault_caught(y, n):
    bad = np.array(to_np(y))
    bad[0, 0, 0] += 1.0                                   # one output row off by one
    return not numpy_ref.close(bad, _numpy(n)[0], *gdn_cases.tolerances(mx.bfloat16)[1:])


def test_planted_fault_is_caught_reference():
    m, n = _make(4, (2, 3, 2, 4, 32, 3, [3, 2]), mx.bfloat16)
    assert _fault_caught(gdc.reference(*_args(m))[0], n)


def test_planted_fault_is_caught_kernel(backend):
    m, n = _make(4, (2, 3, 2, 4, 32, 3, [3, 2]), mx.bfloat16)
    assert _fault_caught(gdc.kernel(*_args(m), backend=backend), n)


@pytest.mark.parametrize("case", GRID + [(1, 8, 16, 32, 128, 2, None), (8, 8, 16, 32, 128, 9, None)])
def test_default_lanes_fit_the_shape(case):
    """The dispatcher's lane choice always satisfies the kernel's layout contract
    (a choice that did not gave NaN on the GPU; the self-test caught it)."""
    B, T, Hk, Hv, D = case[:5]
    lanes = gdc.default_lanes(B, Hv, D, D)
    q = mx.zeros((B, T, Hk, D))
    v = mx.zeros((B, T, Hv, D))
    assert gdc.applies(q, q, v, mx.zeros((2, Hv, D, D)), lanes)


def test_reference_with_raw_gates_is_the_reference_of_their_decay():
    """decay = (A_log, dt_bias): g and beta are the raw a, b, as gated_delta_step's."""
    from kernels.gated_delta_step import raw_gates
    m, _ = _make(2, GRID[2], mx.float32)
    a = mx.random.normal(m["g"].shape, key=mx.random.key(3)) * 2
    b = mx.random.normal(m["beta"].shape, key=mx.random.key(4))
    decay = (mx.random.uniform(0.0, 2.5, (a.shape[-1],), key=mx.random.key(5)),
             mx.random.normal((a.shape[-1],), key=mx.random.key(6)))
    args = _args(m)
    got = gdc.reference(*args[:3], a, b, *args[5:], decay=decay)
    want = gdc.reference(*args[:3], *raw_gates(a, b, decay), *args[5:])
    for x, y in zip(got, want):
        assert mx.array_equal(x, y).item()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_body_runs_the_models_launch_on_the_cpu():
    """kernels/bench/cuda_on_cpu_chunk.py: q/k/v views, raw gates, ragged and fresh rows,
    slots out of order, against float64 numpy (g++ shim: a block's threads as threads)."""
    from kernels.bench.cuda_on_cpu_chunk import CASES, emulate_chunk
    B, T, S, heads, lanes, lengths, fresh, gates = CASES[0]
    assert emulate_chunk(B, T, S, heads, lanes, lengths, fresh, seed=11, gates=gates) < 1e-4


def test_the_self_tests_chunk_check_runs_both_launches(monkeypatch):
    """kernels/selftest_checks.check_chunk with a stand-in for the GPU kernel that does
    what it does (the reference, the pool rows written): the check's own plumbing (the
    raw-gate case's views and decay) runs and reports no error."""
    import kernels.selftest_checks as checks
    launches = []

    def as_the_kernel(q, k, v, g, beta, pool, slots, lengths=None, fresh=None, *, backend,
                      lanes=None, decay=None):
        launches.append(decay is not None)
        y, rows = gdc.reference(q, k, v, g, beta, pool, slots, lengths, fresh, decay=decay)
        pool[slots] = rows                       # the kernel writes them in place
        return y.astype(q.dtype)
    monkeypatch.setattr(gdc, "kernel", as_the_kernel)
    assert checks.check_chunk("cuda") < checks.TOL
    assert launches == [False, True]
