
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


# -- raw gates (decay = (A_log, dt_bias)) and strided views, as the model hands them --

def _raw_gates(seed, B, Hv, dtype):
    """a, b [B, Hv] as columns of a wider projection row (strided views), A_log, dt_bias
    [Hv]; numpy float64 g, beta from the values the kernel sees."""
    rng = np.random.default_rng(seed)
    wide = mx.array(rng.standard_normal((B, 2 * Hv + 5)) * 2.0, dtype)
    a, b = wide[:, 3:3 + Hv], wide[:, 3 + Hv:3 + 2 * Hv]
    a_log = mx.array(np.log(rng.uniform(1.0, 16.0, Hv)), mx.float32)
    dt_bias = mx.array(rng.standard_normal(Hv), dtype)
    x = to_np(a).astype(np.float64) + to_np(dt_bias)
    g = np.exp(-np.exp(to_np(a_log).astype(np.float64)) * np.logaddexp(x, 0.0))
    beta = 1.0 / (1.0 + np.exp(-to_np(b).astype(np.float64)))
    return (a, b, (a_log, dt_bias)), (g, beta)


def _raw_step_args(seed, shape, dtype):
    """Step inputs with raw gates and q/k/v as views of wider arrays (strided rows)."""
    B, Hk, Hv, D, S = shape
    m, n = gdn_cases.make(seed, B, 1, Hk, Hv, D, S, dtype=dtype)
    (a, b, decay), (g, beta) = _raw_gates(seed + 100, B, Hv, dtype)
    n["g"], n["beta"] = g[:, None], beta[:, None]
    q, k, v = (mx.concatenate([m[x][:, 0], m[x][:, 0]], axis=-1)[..., :D] for x in "qkv")
    return (q, k, v, a, b, m["pool"], m["slots"], m["fresh"]), decay, m, n


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_with_raw_gates_matches_numpy(shape, dtype, cpu_stream):
    args, decay, _, n = _raw_step_args(6, shape, dtype)
    _check(*gds.reference(*args, decay=decay), n, dtype)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_with_raw_gates_on_strided_views_matches_numpy(backend, shape, dtype):
    args, decay, m, n = _raw_step_args(7, shape, dtype)
    y = gds.kernel(*args, backend=backend, decay=decay)
    mx.eval(y)
    _check(y, m["pool"][m["slots"]], n, dtype)


def test_planted_fault_in_the_gates_is_caught(cpu_stream):
    args, decay, _, n = _raw_step_args(8, GRID[1], mx.float32)
    bad = (decay[0], decay[1] + 0.05)                 # dt_bias read 0.05 off
    with pytest.raises(AssertionError):
        _check(*gds.reference(*args, decay=bad), n, mx.float32)


class _StepByReference(KernelSet):
    """The step kernel's contract on any machine: its reference, the pool rows scattered."""
    calls = []

    def gated_delta_step(self, q, k, v, g, beta, pool, slots, fresh=None, decay=None):
        if not gds.applies(q, k, v, pool, gds.pick_lanes(q.shape[-1], v.shape[-1])):
            return None
        self.calls.append(decay is not None)
        y, rows = gds.reference(q, k, v, g, beta, pool, slots, fresh, decay=decay)
        pool = mx.array(pool)
        pool[slots] = rows
        return y, pool


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
def test_the_layer_hands_the_step_kernel_its_raw_gates_as_its_plain_path_reads_them(model_type):
    """Wiring: decode steps (a fresh row among them) through the step kernel's contract,
    fed the raw a, b and the layer's A_log, dt_bias, give the plain path's logits and
    recurrent states."""
    from float32_tolerance import assert_close, model_depth
    from qwen_fixtures import Rows
    from test_gdn_conv_step import _model

    from engine.models.base import use_kernels
    from kernels.backend import NAMES
    from kernels.kernel_set import NO_KERNELS
    model = _model(model_type)
    runs = {}
    others = tuple((n, "test") for n in NAMES if n != gds.NAME)
    for name, kernels in (("plain", NO_KERNELS), ("kernel", _StepByReference("cuda", others))):
        use_kernels(model, kernels)
        rows = Rows(model)
        for s in (0, 1):
            rows.start(s)
        out = [rows.forward({0: [5, 6, 7, 8], 1: [9, 10]})]
        rows.start(2)
        for step in range(3):       # seq 2 starts with a one-token prompt: a fresh decode row
            out.append(rows.forward({0: [11 + step], 1: [20 + step], 2: [30 + step]}))
        runs[name] = ([np.array(o) for o in out],
                      [np.array(layer[1]) for layer in rows.cache.states])
    # 3 decode steps x the tiny model's Gated DeltaNet layers, each given the raw gates
    assert _StepByReference.calls and all(_StepByReference.calls)
    depth = model_depth(model, 4 + 3)
    for i, (got, want) in enumerate(zip(runs["kernel"][0], runs["plain"][0])):
        assert_close(got, want, depth, f"logits of forward {i}")
    for i, (got, want) in enumerate(zip(runs["kernel"][1], runs["plain"][1])):
        assert_close(got, want, depth, f"recurrent states of layer {i}")
