"""The decode step with Gated DeltaNet's output norm in its epilogue
(kernels/gated_delta_step_norm.py) against an independent float64 numpy reference, its
float32 reference and the two launches it replaces; its dispatch; and the layer's use of
it against its plain path. The kernel tests skip without a GPU (conftest's `backend`)."""
import kernel_gdn_cases as gdn_cases
import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from float32_tolerance import EPS32, K
from kernel_numpy_ref import to_np
from test_gated_delta_step import _raw_step_args

import kernels.gated_delta_step as gds
import kernels.gated_delta_step_norm as gdsn
import kernels.gated_rms_norm as grn
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

# (B, Hk, Hv, D, S): test_gated_delta_step's grid (layouts (8, 1), (8, 1), (16, 1) and
# (16, 2)), and the real heads (16, 32, 128) at B=1 and B=3
GRID = [(1, 2, 2, 32, 3), (4, 2, 4, 32, 7), (3, 1, 4, 64, 5), (5, 4, 8, 128, 9),
        (1, 16, 32, 128, 2), (3, 16, 32, 128, 4)]
DTYPES = [mx.float32, mx.bfloat16]
EPS = 1e-6


def _make(seed, shape, dtype, heads_apart=False):
    """The model's launch: raw gates and q/k/v as strided views (test_gated_delta_step's
    _raw_step_args), z a strided view [B, Hv*D] (columns 8.. of wider rows, as Qwen3.5's
    joined projection gives it) or with heads_apart [B, Hv, D] (columns 8..8+D of wider
    head rows, as Qwen3-Next's grouped one), the norm's weight [D]. Returns (args, kwargs
    for the kernel / reference, m, n); n["z"] is [B, Hv, D] either way."""
    (q, k, v, a, b, pool, slots, fresh), decay, m, n = _raw_step_args(seed, shape, dtype)
    B, _, Hv, D, _ = shape
    rng = np.random.default_rng(seed + 200)
    if heads_apart:
        z = mx.array(rng.standard_normal((B, Hv, D + 24)), dtype)[..., 8:8 + D]
    else:
        z = mx.array(rng.standard_normal((B, Hv * D + 24)), dtype)[:, 8:8 + Hv * D]
    w = mx.array(1 + 0.1 * rng.standard_normal(D), dtype)
    n["z"] = to_np(z).astype(np.float64).reshape(B, Hv, D)
    n["w"] = to_np(w).astype(np.float64)
    return (q, k, v, a, b, pool, slots, z, w, EPS), {"fresh": fresh, "decay": decay}, m, n


def _expected(n, y_rtol=0.0):
    """float64 (out [B, Hv, D], new states, the tolerance of out), the tolerance in
    tests/float32_tolerance.py's terms. y_i is a sum over Dk of S_ij q_j, the new state
    S_ij = g S0_ij + k_j delta_i, delta_i = beta (v_i - sum_l g S0_il k_l): a float32 run
    errs by a walk of K * eps32 * sqrt(2 Dk + 4) times the largest partial sum of the head
    (m below; g S0 times 1 + |log g|, the conditioning of g = exp(-x) computed in float32),
    plus y_rtol |y| where y is rounded before the norm (the two-launch path). The norm
    divides by rms(y): out_i = y_i s_i / rms, s = w silu(z), |d rms| <= max |dy|, so
    |d out_i| <= (|s_i| |dy_i| + |out_i| max|dy|) / rms, and the norm's own float32 work
    (Dv squares summed, rsqrt, the products) adds a walk of sqrt(Dv + 8) at |out_i|.
    A head whose y nearly cancels (small rms against m) is allowed more: that is its
    conditioning, not slack."""
    ny, nst = numpy_ref.gdn(n["q"], n["k"], n["v"], n["g"], n["beta"], n["state0"],
                            n["lengths"])
    y = ny[:, 0]                                                     # [B, Hv, Dv]
    B, Hv, Dv = y.shape
    Dk = n["q"].shape[-1]
    rep = Hv // n["q"].shape[2]
    q, k = (np.abs(np.repeat(n[x][:, 0], rep, axis=1))[:, :, None, :] for x in "qk")
    g = n["g"][:, 0][..., None, None]                                # [B, Hv, 1, 1]
    cond = 1 + np.where(g > 0, -np.log(np.where(g > 0, g, 1.0)), 0.0)
    gs = np.abs(n["state0"]) * g * cond                              # [B, Hv, Dv, Dk]
    d = n["beta"][:, 0][..., None] * (np.abs(n["v"][:, 0]) + (gs * k).sum(-1))
    m = ((gs + k * d[..., None]) * q).sum(-1)                        # [B, Hv, Dv]
    dy = K * EPS32 * np.sqrt(2 * Dk + 4) * m.max(-1, keepdims=True) + y_rtol * np.abs(y)
    rms = np.sqrt((y * y).mean(-1, keepdims=True) + EPS)
    s = n["w"] * n["z"] / (1 + np.exp(-n["z"]))
    out = y / rms * s
    tol = ((np.abs(s) * dy + np.abs(out) * dy.max(-1, keepdims=True)) / rms
           + K * EPS32 * np.sqrt(Dv + 8) * np.abs(out))
    return out, nst, tol


def _rounding(dtype) -> float:
    """An output's own rounding, relative: 2**-8 in bf16 (8 significant bits), else 0 (in
    the walk above)."""
    return 2.0 ** -8 if dtype == mx.bfloat16 else 0.0


def _within(got, want, tol, rtol) -> bool:
    got = to_np(got).astype(np.float64)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= tol + rtol * np.abs(want)))


def _check(out, rows, n, dtype):
    """out against numpy within _expected's tolerance (y stays float32 inside the kernel
    whatever the inputs; a bf16 output adds its rounding); states as the step's tests."""
    want, nst, tol = _expected(n)
    assert numpy_ref.close(to_np(rows), nst, gdn_cases.tolerances(dtype)[0])
    assert out.dtype == dtype and _within(out, want, tol, _rounding(dtype)), \
        f"max |out - numpy| {np.abs(to_np(out) - want).max():.3e}"


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads_apart", [False, True])
def test_reference_matches_numpy(shape, dtype, cpu_stream, heads_apart):
    args, kw, _, n = _make(0, shape, dtype, heads_apart)
    _check(*gdsn.reference(*args, **kw), n, dtype)


def test_planted_faults_are_caught(cpu_stream):
    args, kw, _, n = _make(1, GRID[1], mx.float32)
    q, k, v, a, b, pool, slots, z, w, eps = args
    _check(*gdsn.reference(*args, **kw), n, mx.float32)
    for bad in ((q, k, v, a, b, pool, slots, z[:, ::-1], w, eps),          # z's columns reversed
                (q, k, v, a, b, pool, slots, z, w * 1.01, eps),            # weight 1 % off
                (q, k, v, a, b, pool, slots, z, w, 1e-2)):                 # eps wrong
        with pytest.raises(AssertionError):
            _check(*gdsn.reference(*bad, **kw), n, mx.float32)
    with pytest.raises(AssertionError):                                    # y's norm skipped
        y, rows = gds.reference(q, k, v, a, b, pool, slots, kw["fresh"], decay=kw["decay"])
        z = z.reshape(y.shape)
        _check(y * w * z * mx.sigmoid(z), rows, n, mx.float32)


@pytest.mark.parametrize("shape", GRID)
def test_the_picked_layout_fits(shape):
    """One block a head of whole warps, at most 1024 threads and 8 floats a lane (registers:
    the module's docstring); the real heads: 16 lanes, 2 rows a thread, 1024 threads."""
    B, Hk, Hv, D, S = shape
    lanes, rows = gdsn.pick_layout(D, D)
    threads = D * lanes // rows
    assert gdsn.fits(D, D, lanes, rows) and threads % 32 == 0 and threads <= 1024
    assert D // lanes <= 8 and gds.applies(mx.zeros((B, Hk, D)), mx.zeros((B, Hk, D)),
                                           mx.zeros((B, Hv, D)), mx.zeros((S, Hv, D, D)), lanes)
    assert gdsn.pick_layout(128, 128) == (16, 2)
    # on CUDA from 16 rows, 512-thread blocks (session 44's H100: faster at B=16 and 32)
    assert [gdsn.pick_layout(128, 128, b, "cuda") for b in (8, 16, 32)] == [
        (16, 2), gdsn.WIDE_LAYOUT, gdsn.WIDE_LAYOUT]
    assert gdsn.pick_layout(128, 128, 32, "metal") == (16, 2)
    assert gdsn.pick_layout(32, 32, 16, "cuda") == gdsn.pick_layout(32, 32)   # 32 lanes: no


# -- the kernel (GPU only) ------------------------------------------------------------

@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads_apart", [False, True])
def test_kernel_matches_numpy(backend, shape, dtype, heads_apart):
    args, kw, m, n = _make(2, shape, dtype, heads_apart)
    before = np.array(m["pool"])
    out = gdsn.kernel(*args, **kw, backend=backend)
    mx.eval(out)                                 # the pool is rewritten in place
    _check(out, m["pool"][m["slots"]], n, dtype)
    others = np.setdiff1d(np.arange(shape[-1]), n["slots"])
    assert np.array_equal(to_np(m["pool"])[others], before[others])


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_its_float32_reference(backend, shape, dtype):
    """Against the float32 reference on this device (y unrounded there too), within the
    tolerance the numpy comparison derives (both are float32 runs of the same math)."""
    args, kw, m, n = _make(3, shape, dtype)
    want, rows = gdsn.reference(*args, **kw)
    mx.eval(want, rows)                          # before the kernel rewrites the pool
    out = gdsn.kernel(*args, **kw, backend=backend)
    mx.eval(out)
    _, _, tol = _expected(n)
    assert _within(out, to_np(want).astype(np.float64), tol, 2 * _rounding(dtype))  # both rounded
    assert numpy_ref.close(to_np(m["pool"][m["slots"]]), to_np(rows),
                           gdn_cases.tolerances(dtype)[0])


@pytest.mark.parametrize("shape", GRID[2:])
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_agrees_with_the_two_launches(backend, shape, dtype):
    """One launch against gated_delta_step then gated_rms_norm on a copy of the pool: the
    two-launch path rounds y to the inputs' dtype before the norm (bf16: 2**-8 of y more
    in the tolerance), and both outputs carry their rounding."""
    args, kw, m, n = _make(4, shape, dtype)
    q, k, v, a, b, pool, slots, z, w, eps = args
    pool2 = mx.array(np.array(pool))
    y = gds.kernel(q, k, v, a, b, pool2, slots, kw["fresh"], backend=backend,
                   decay=kw["decay"])
    two = grn.kernel(y[:, None], z.reshape(y.shape)[:, None], w, eps, backend=backend)[:, 0]
    one = gdsn.kernel(*args, **kw, backend=backend)
    mx.eval(two, one)
    _, _, tol = _expected(n, y_rtol=_rounding(dtype))     # y rounded on the two-launch path
    assert _within(one, to_np(two).astype(np.float64), tol, 2 * _rounding(dtype))
    s_atol = gdn_cases.tolerances(dtype)[0]       # the same update (lanes sum apart)
    assert numpy_ref.close(to_np(pool[slots]), to_np(pool2[slots]), s_atol)


# Other (lanes, rows) than the picked ones. (64, (32, 2)) was here until session 19 and
# failed on the H200: 32 lanes leave a 64-wide row 2 floats a lane, not a float4 chunk.
OTHER_LAYOUTS = [(128, (16, 2)), (128, (32, 4)), (128, (16, 4)), (128, gdsn.WIDE_LAYOUT),
                 (64, (8, 1)), (64, (16, 4)), (64, (16, 2))]


def test_the_other_layouts_fit():
    """Checked here, without a GPU: the kernel test below runs only where one is."""
    assert all(gdsn.fits(D, D, *layout) for D, layout in OTHER_LAYOUTS)


@pytest.mark.parametrize("D, layout", OTHER_LAYOUTS)
def test_every_layout_that_fits(backend, D, layout):
    """Other (lanes, rows) than the picked ones: the row loop and the lane groups."""
    args, kw, m, n = _make(5, (3, 2, 4, D, 5), mx.float32)
    out = gdsn.kernel(*args, **kw, backend=backend, layout=layout)
    mx.eval(out)
    _check(out, m["pool"][m["slots"]], n, mx.float32)


def test_kernel_writes_through_a_strided_pool(backend):
    """The pool may be a view (slot axis strided): writes land in the parent array."""
    args, kw, m, n = _make(6, (3, 1, 2, 32, 5), mx.float32)
    big = mx.stack([mx.zeros_like(m["pool"]), m["pool"]], axis=1)   # [S, 2, Hv, Dv, Dk]
    mx.eval(big)
    args = list(args)
    args[5] = big[:, 1]
    out = gdsn.kernel(*args, **kw, backend=backend)
    mx.eval(out)
    _check(out, big[:, 1][m["slots"]], n, mx.float32)
    assert not np.any(to_np(big[:, 0]))


def test_dispatcher_writes_pool_in_place(backend):
    args, kw, m, n = _make(7, GRID[1], mx.bfloat16)
    before = np.array(m["pool"])
    out, pool = KernelSet(backend).gated_delta_step_norm(*args, **kw)
    mx.eval(out, pool)                           # evaluate before reading rows (contract)
    _check(out, pool[m["slots"]], n, mx.bfloat16)
    others = np.setdiff1d(np.arange(GRID[1][-1]), n["slots"])
    assert np.array_equal(to_np(pool)[others], before[others])


# -- dispatch and counting (any machine) ------------------------------------------------

def test_dispatch_declines_where_the_kernel_does_not_apply(monkeypatch):
    """None (the caller runs the step and the norm) where the kernel is off or the shapes are
    outside its contract; a launch where they fit (the control)."""
    launched = []
    monkeypatch.setattr(gdsn, "kernel", lambda *a, **k: launched.append(1) or a[0][:, :1])
    args, kw, _, _ = _make(8, GRID[1], mx.float32)
    q, k, v, a, b, pool, slots, z, w, eps = args
    on = KernelSet("cuda")
    assert NO_KERNELS.gated_delta_step_norm(*args, **kw) is None
    assert KernelSet("cuda", ((gdsn.NAME, "test"),)).gated_delta_step_norm(*args, **kw) is None
    bad = {"a half pool": (q, k, v, a, b, pool.astype(mx.float16), slots, z, w, eps),
           "z of another width": (q, k, v, a, b, pool, slots, z[..., :-1], w, eps),
           "z with a T axis": (q, k, v, a, b, pool, slots, z[:, None], w, eps),
           "z of v's heads split otherwise": (q, k, v, a, b, pool, slots,
                                              z.reshape(z.shape[0], 2, -1), w, eps),
           "a weight per head": (q, k, v, a, b, pool, slots, z, mx.ones((4, 32)), eps),
           "an integer gate": (q, k, v, a, b, pool, slots, z.astype(mx.int32), w, eps)}
    for what, call in bad.items():
        assert on.gated_delta_step_norm(*call, **kw) is None, what
    # Dk = 96: no layout keeps 8 floats a lane, though the step kernel alone applies
    odd, okw, _, _ = _make(9, (2, 1, 2, 96, 3), mx.float32)
    assert gdsn.pick_layout(96, 96) is None and on.gated_delta_step_norm(*odd, **okw) is None
    assert gds.applies(*odd[:3], odd[5], gds.pick_lanes(96, 96))
    assert not launched
    out, _ = on.gated_delta_step_norm(*args, **kw)       # inside the contract: it launches
    assert launched == [1] and out.shape == (4, 1, 32)


def test_one_launch():
    args, kw, _, _ = _make(10, GRID[1], mx.bfloat16)
    with gpu_graph() as ledger:
        out, pool = KernelSet(COUNT).gated_delta_step_norm(*args, **kw)
    assert ledger.calls == {gdsn.NAME: 1}
    assert (out.shape, out.dtype) == ((4, 4, 32), mx.bfloat16) and pool.shape == args[5].shape


# -- the layer -------------------------------------------------------------------------

class _StepNormByReference(KernelSet):
    """The kernel's contract on any machine: its reference, the pool rows scattered."""
    calls = []

    def gated_delta_step_norm(self, q, k, v, g, beta, pool, slots, z, weight, eps, fresh=None,
                              decay=None, joined=False, columns=None):
        if (self.launches(gdsn.NAME) is None
                or not gdsn.applies(q, k, v, pool, z, weight, columns)):
            return None
        self.calls.append("step_norm")
        out, rows = gdsn.reference(q, k, v, g, beta, pool, slots, z, weight, eps, fresh,
                                   decay=decay, columns=columns)
        pool = mx.array(pool)
        pool[slots] = rows
        return (out.reshape(out.shape[0], -1) if joined else out), pool


def _decode_runs(model, kernels):
    """Logits of a prefill and 3 decode steps (a fresh decode row among them), and the
    recurrent states after them."""
    from qwen_fixtures import Rows

    from engine.models.base import use_kernels
    use_kernels(model, kernels)
    rows = Rows(model)
    for s in (0, 1):
        rows.start(s)
    out = [rows.forward({0: [5, 6, 7, 8], 1: [9, 10]})]
    rows.start(2)
    for step in range(3):       # seq 2 starts with a one-token prompt: a fresh decode row
        out.append(rows.forward({0: [11 + step], 1: [20 + step], 2: [30 + step]}))
    return [np.array(o) for o in out], [np.array(layer[1]) for layer in rows.cache.states]


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
def test_the_layer_runs_step_and_norm_in_one_launch_as_its_plain_path(model_type):
    """Wiring: decode steps through the kernel's contract (raw a, b, the layer's A_log,
    dt_bias, its norm's weight and eps, z as the layer splits it) give the plain path's
    logits and recurrent states."""
    from float32_tolerance import assert_close, model_depth
    from test_gdn_conv_step import _model

    model = _model(model_type)
    others = tuple((name, "test") for name in NAMES if name != gdsn.NAME)
    _StepNormByReference.calls = []
    plain = _decode_runs(model, NO_KERNELS)
    fused = _decode_runs(model, _StepNormByReference("cuda", others))
    assert _StepNormByReference.calls.count("step_norm") == 3 * _gdn_layers(model)
    depth = model_depth(model, 4 + 3)
    for i, what in enumerate(("logits of forward", "recurrent states of layer")):
        for j, (got, want) in enumerate(zip(fused[i], plain[i])):
            assert_close(got, want, depth, f"{model_type} {what} {j}")


class _TwoLaunches(_StepNormByReference):
    """The step's and the norm's contracts beside the fused one's (test_gated_delta_step's
    and test_gated_rms_norm's), each call recorded."""

    def gated_delta_step(self, q, k, v, g, beta, pool, slots, fresh=None, decay=None):
        lanes = gds.pick_lanes(q.shape[-1], v.shape[-1])
        if self.launches(gds.NAME) is None or not gds.applies(q, k, v, pool, lanes):
            return None
        self.calls.append("step")
        y, rows = gds.reference(q, k, v, g, beta, pool, slots, fresh, decay=decay)
        pool = mx.array(pool)
        pool[slots] = rows
        return y, pool

    def gated_rms_norm(self, y, z, weight, eps):
        if self.launches(grn.NAME) is None or not grn.applies(y, z, weight):
            return None
        self.calls.append(("norm", y.shape[1]))           # T: 1 at decode
        return grn.reference(y, z, weight, eps)


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
def test_with_the_fused_kernel_off_decode_runs_the_two_launches_as_before(model_type):
    """The fused kernel off (its self-test failed, say): every decode step of every Gated
    DeltaNet layer runs gated_delta_step then gated_rms_norm, as before it existed, and
    the same logits and states as with it on (within float32 rounding)."""
    from float32_tolerance import assert_close, model_depth
    from test_gdn_conv_step import _model

    model = _model(model_type)
    keep = (gds.NAME, grn.NAME, gdsn.NAME)
    others = tuple((name, "test") for name in NAMES if name not in keep)
    layers = _gdn_layers(model)
    runs, calls = {}, {}
    for name, off in (("on", others), ("off", others + ((gdsn.NAME, "test"),))):
        _TwoLaunches.calls = []
        runs[name] = _decode_runs(model, _TwoLaunches("cuda", off))
        calls[name] = list(_TwoLaunches.calls)
    decode_norms = [c for c in calls["off"] if c == ("norm", 1)]
    assert "step_norm" not in calls["off"]
    assert calls["off"].count("step") == len(decode_norms) == 3 * layers
    assert calls["on"].count("step_norm") == 3 * layers
    assert "step" not in calls["on"] and ("norm", 1) not in calls["on"]
    depth = model_depth(model, 4 + 3)
    for i, (g, p) in enumerate(zip(runs["off"][0], runs["on"][0])):
        assert_close(g, p, depth, f"{model_type} logits of forward {i}")


def _gdn_layers(model) -> int:
    from engine.models.gated_deltanet import GatedDeltaNet
    return sum(isinstance(m, GatedDeltaNet) for _, m in model.named_modules())
