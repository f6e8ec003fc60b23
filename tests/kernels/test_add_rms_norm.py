"""The residual add + RMSNorm kernel (kernels/add_rms_norm.py) against an independent
float64 numpy reference, and the decoder layers' use of it against their plain path."""
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import close, to_np

import kernels.add_rms_norm as arn
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

# (N, D): one row (decode B=1), several, the real width, a width no block divides
GRID = [(1, 2048), (5, 128), (3, 200), (2, 40)]
DTYPES = [mx.float32, mx.bfloat16]
EPS = 1e-6


def _make(seed, N, D, dtype, wdtype=None):
    rng = np.random.default_rng(seed)
    x = mx.array(rng.standard_normal((N, D)), dtype)
    wide = mx.array(rng.standard_normal((N, D + 24)), dtype)
    r = wide[:, 8:8 + D]                                 # a strided view
    w = mx.array(1 + 0.1 * rng.standard_normal(D), wdtype or dtype)
    return x, r, w


def numpy_add_norm(x, r, w):
    """float64 from the values the kernel sees: h rounded to x's dtype first (as x + r)."""
    h = to_np((x.astype(mx.float32) + r.astype(mx.float32)).astype(x.dtype)).astype(np.float64)
    return h, h / np.sqrt((h * h).mean(-1, keepdims=True) + EPS) * to_np(w)


def _close(h, y, want, dtype) -> bool:
    rtol = 2.0 ** -8 if dtype == mx.bfloat16 else 1e-5     # y rounds to its dtype
    return close(to_np(h), want[0], 0.0) and close(to_np(y), want[1], 1e-6, rtol)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(shape, dtype, cpu_stream):
    args = _make(0, *shape, dtype)
    h, y = arn.reference(*args, EPS)
    assert (h.dtype, y.dtype) == (dtype, dtype)
    assert _close(h, y, numpy_add_norm(*args), dtype)


def test_reference_promotes_like_mx_fast(cpu_stream):
    args = _make(1, 2, 64, mx.bfloat16, mx.float32)
    h, y = arn.reference(*args, EPS)
    assert (h.dtype, y.dtype) == (mx.bfloat16, mx.fast.rms_norm(args[0], args[2], EPS).dtype)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, shape, dtype):
    args = _make(2, *shape, dtype)
    h, y = arn.kernel(*args, EPS, backend=backend)
    assert _close(h, y, numpy_add_norm(*args), dtype)


def test_planted_fault_is_caught(cpu_stream):
    args = _make(3, 3, 200, mx.float32)
    h, y = arn.reference(*args, EPS)
    want = numpy_add_norm(*args)
    assert _close(h, y, want, mx.float32)
    assert not _close(h, y + 1e-4, want, mx.float32)
    bad_h, bad_y = arn.reference(args[0], args[1], args[2], EPS * 1e4)   # eps read wrong
    assert not _close(bad_h, bad_y, want, mx.float32)


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(arn, "kernel", refuse)
    x, r, w = _make(4, 2, 64, mx.float32)
    assert NO_KERNELS.add_rms_norm(x, r, w, EPS) is None
    ks = KernelSet("cuda")
    assert ks.add_rms_norm(x[None], r[None], w, EPS) is None            # [1, N, D]
    assert ks.add_rms_norm(x, r[:, :32], w, EPS) is None                # shapes differ


def test_one_launch():
    x, r, w = _make(5, 2, 64, mx.float32)
    with gpu_graph() as ledger:
        h, y = KernelSet(COUNT).add_rms_norm(x, r, w, EPS)
    assert ledger.calls == {"add_rms_norm": 1} and h.shape == y.shape == x.shape


class _AddNormByReference(KernelSet):
    """The kernel's contract on any machine: its reference."""
    calls = []

    def add_rms_norm(self, x, r, weight, eps):
        if not arn.applies(x, r, weight):
            return None
        self.calls.append(x.shape)
        return arn.reference(x, r, weight, eps)


def _llama():
    from tiny_models import tiny_llama
    return tiny_llama(seed=3)


def _qwen(model_type):
    from test_gdn_conv_step import _model
    return _model(model_type)


@pytest.mark.parametrize("family", ["qwen3_5_moe", "qwen3_5", "qwen3_next", "llama"])
def test_the_layers_add_and_norm_through_the_kernel_as_their_plain_path_does(family):
    """Wiring: prefill and decode steps through the kernel's contract give the plain
    path's logits (within float32 rounding)."""
    from float32_tolerance import assert_close, model_depth
    from kernel_wiring import plain_and_kernel_logits
    model = _llama() if family == "llama" else _qwen(family)
    others = tuple((n, "test") for n in NAMES if n != arn.NAME)
    plain, kernel = plain_and_kernel_logits(model, _AddNormByReference("cuda", others))
    runs = {"plain": plain, "kernel": kernel}
    assert _AddNormByReference.calls
    depth = model_depth(model, 4 + 3)
    for i, (got, want) in enumerate(zip(runs["kernel"], runs["plain"])):
        assert_close(got, want, depth, f"{family} logits of forward {i}")
