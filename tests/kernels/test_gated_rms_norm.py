"""Gated DeltaNet's output norm kernel (kernels/gated_rms_norm.py) against an independent
float64 numpy reference, and the layer's use of it against its plain path."""
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import close, to_np

import kernels.gated_rms_norm as grn
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

# (B, T, H, D): decode at the real heads, a chunk, a width that is no multiple of 32
GRID = [(1, 1, 32, 128), (3, 1, 4, 32), (2, 5, 2, 64), (2, 2, 3, 40)]
DTYPES = [mx.float32, mx.bfloat16]
EPS = 1e-6


def _make(seed, B, T, H, D, dtype):
    rng = np.random.default_rng(seed)
    y = mx.array(rng.standard_normal((B, T, H, D)), dtype)
    wide = mx.array(rng.standard_normal((B, T, H * D + 24)), dtype)
    z = wide[..., 8:8 + H * D].reshape(B, T, H, D)       # a view of a wider projection
    w = mx.array(1 + 0.1 * rng.standard_normal(D), dtype)
    return y, z, w


def numpy_gated_norm(y, z, w):
    y, z, w = (to_np(a).astype(np.float64) for a in (y, z, w))
    return y / np.sqrt((y * y).mean(-1, keepdims=True) + EPS) * w * z / (1 + np.exp(-z))


def _close(out, want, dtype) -> bool:
    rtol = 2.0 ** -8 if dtype == mx.bfloat16 else 1e-5
    return close(to_np(out), want, 1e-6, rtol)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(shape, dtype, cpu_stream):
    args = _make(0, *shape, dtype)
    out = grn.reference(*args, EPS)
    assert out.dtype == dtype and _close(out, numpy_gated_norm(*args), dtype)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, shape, dtype):
    args = _make(1, *shape, dtype)
    assert _close(grn.kernel(*args, EPS, backend=backend), numpy_gated_norm(*args), dtype)


def test_planted_fault_is_caught(cpu_stream):
    y, z, w = _make(2, 2, 1, 3, 64, mx.float32)
    want = numpy_gated_norm(y, z, w)
    assert _close(grn.reference(y, z, w, EPS), want, mx.float32)
    assert not _close(grn.reference(y, z[:, :, ::-1], w, EPS), want, mx.float32)  # heads swapped
    assert not _close(grn.reference(y, z, w, EPS) * 1.0001, want, mx.float32)


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(grn, "kernel", refuse)
    y, z, w = _make(3, 2, 1, 2, 32, mx.float32)
    assert NO_KERNELS.gated_rms_norm(y, z, w, EPS) is None
    assert KernelSet("cuda").gated_rms_norm(y[:, 0], z[:, 0], w, EPS) is None   # 3-D


def test_one_launch():
    y, z, w = _make(4, 2, 1, 2, 32, mx.float32)
    with gpu_graph() as ledger:
        out = KernelSet(COUNT).gated_rms_norm(y, z, w, EPS)
    assert ledger.calls == {"gated_rms_norm": 1} and out.shape == y.shape


class _GatedNormByReference(KernelSet):
    """The kernel's contract on any machine: its reference."""
    calls = []

    def gated_rms_norm(self, y, z, weight, eps):
        if not grn.applies(y, z, weight):
            return None
        self.calls.append(y.shape)
        return grn.reference(y, z, weight, eps)


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
def test_the_layer_norms_through_the_kernel_as_its_plain_path_does(model_type):
    """Wiring: prefill chunks and decode steps through the kernel's contract give the
    plain path's logits (within float32 rounding)."""
    from float32_tolerance import assert_close, model_depth
    from kernel_wiring import plain_and_kernel_logits
    from test_gdn_conv_step import _model

    model = _model(model_type)
    others = tuple((n, "test") for n in NAMES if n != grn.NAME)
    plain, kernel = plain_and_kernel_logits(model, _GatedNormByReference("cuda", others))
    runs = {"plain": plain, "kernel": kernel}
    assert _GatedNormByReference.calls
    depth = model_depth(model, 4 + 3)
    for i, (got, want) in enumerate(zip(runs["kernel"], runs["plain"])):
        assert_close(got, want, depth, f"{model_type} logits of forward {i}")
