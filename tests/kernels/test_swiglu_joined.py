"""SwiGLU read from the joined gate_up output (kernels/swiglu_joined.py) against an
independent float64 numpy reference, and the MLPs' use of it against their plain path."""
import io
import shutil

import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import close, to_np

import kernels.swiglu_joined as sj
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

# (N, I, padding after up): one row (decode B=1) at SmolLM2's width, several, ragged
GRID = [(1, 1536, 0), (5, 128, 0), (3, 200, 24), (2, 40, 8)]
DTYPES = [mx.float32, mx.bfloat16, mx.float16]
# float32: the math's own error, bounded by its exp: MLX's CPU exp (and sigmoid) came out
# within 26 units of 2**-24 of float64 over 200,000 normal values (deviation 6) (CUDA's expf: 2
# ulps), so 32 units; a divide and two products add 3. bf16 and float16 round the float32
# result once more, to 8 / 11 significant bits; float16's subnormals (below 2**-14) are
# spaced 2**-24 apart, so half of that is its absolute floor.
F32 = 35 * 2.0 ** -24
RTOL = {mx.float32: F32, mx.bfloat16: 2.0 ** -8 + F32, mx.float16: 2.0 ** -11 + F32}
ATOL = {mx.float32: 0.0, mx.bfloat16: 0.0, mx.float16: 2.0 ** -25}


def _make(seed, N, I, pad, dtype):   # noqa: E741 (I: the MLP's width)
    rng = np.random.default_rng(seed)
    return mx.array(rng.standard_normal((N, 2 * I + pad)) * 3, dtype)


def numpy_swiglu(a, I):   # noqa: E741
    x = to_np(a).astype(np.float64)
    g, u = x[:, :I], x[:, I:2 * I]
    return g / (1 + np.exp(-g)) * u


def _close(y, want, dtype) -> bool:
    return close(to_np(y), want, ATOL[dtype], RTOL[dtype])


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(shape, dtype, cpu_stream):
    a = _make(0, *shape, dtype)
    y = sj.reference(a, shape[1], shape[1])
    assert y.dtype == dtype and y.shape == (shape[0], shape[1])
    assert _close(y, numpy_swiglu(a, shape[1]), dtype)


@pytest.mark.parametrize("shape", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, shape, dtype):
    a = _make(2, *shape, dtype)
    y = sj.kernel(a, shape[1], shape[1], backend=backend)
    assert y.dtype == dtype and _close(y, numpy_swiglu(a, shape[1]), dtype)


def test_planted_fault_is_caught(cpu_stream):
    a = _make(3, 3, 200, 24, mx.float32)
    want = numpy_swiglu(a, 200)
    assert _close(sj.reference(a, 200, 200), want, mx.float32)
    assert not _close(sj.reference(a, 200, 200) * (1 + 1e-5), want, mx.float32)
    assert not _close(sj.reference(a, 201, 200), want, mx.float32)     # up read one off


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_body_runs_on_the_cpu():
    """kernels/bench/cuda_on_cpu_swiglu.py: padded rows, N * I not a block multiple,
    against float64 numpy (g++ shim)."""
    from kernels.bench.cuda_on_cpu_swiglu import CASES, emulate_swiglu
    assert emulate_swiglu(*CASES[1], seed=12) < RTOL[mx.float32]


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(sj, "kernel", refuse)
    a = _make(4, 2, 64, 0, mx.float32)
    ks = KernelSet("cuda")
    assert NO_KERNELS.swiglu_joined(a, 64, 64) is None
    assert KernelSet("cuda", (("swiglu_joined", "off"),)).swiglu_joined(a, 64, 64) is None
    assert ks.swiglu_joined(a[None], 64, 64) is None                   # [1, N, W]
    assert ks.swiglu_joined(a, 65, 64) is None                         # up past the row
    assert ks.swiglu_joined(a, 32, 64) is None                         # up inside the gate
    assert ks.swiglu_joined(a[:0], 64, 64) is None                     # no rows
    assert ks.swiglu_joined(a.astype(mx.int32), 64, 64) is None


def test_the_mlp_is_one_node_between_its_projections():
    """The dense MLP's joined gate_up output goes to the kernel whole: one launch and no
    Split node (the plain path: a Split and the compiled swiglu)."""
    from engine.models.base import use_kernels
    from engine.models.mlp import MLP
    mlp = MLP(64, 96)
    mlp.fuse_projections()
    mx.eval(mlp.parameters())
    use_kernels(mlp, KernelSet(COUNT))
    with gpu_graph() as ledger:
        y = mlp(mx.zeros((1, 64)))
        dot = io.StringIO()
        mx.export_to_dot(dot, y)
    assert ledger.calls == {"swiglu_joined": 1} and y.shape == (1, 64)
    assert "Split" not in dot.getvalue()
    use_kernels(mlp, NO_KERNELS)
    with gpu_graph():
        dot = io.StringIO()
        mx.export_to_dot(dot, mlp(mx.zeros((1, 64))))
    assert "Split" in dot.getvalue()                    # what the kernel takes out


class _SwigluByReference(KernelSet):
    """The kernel's contract on any machine: its reference."""
    calls = []

    def swiglu_joined(self, a, up_col, width):
        if not sj.applies(a, up_col, width):
            return None
        self.calls.append(a.shape)
        return sj.reference(a, up_col, width)


@pytest.mark.parametrize("family", ["qwen3_5_moe", "qwen3_5", "llama"])
def test_the_mlps_run_through_the_kernel_as_their_plain_path_does(family):
    """Wiring: prefill and decode steps through the kernel's contract give the plain
    path's logits (within float32 rounding): the llama layers' MLP, and Qwen3.5's
    shared expert where the MoE block runs it as an MLP."""
    from float32_tolerance import assert_close, model_depth
    from kernel_wiring import plain_and_kernel_logits
    from test_gdn_conv_step import _model
    from tiny_models import tiny_llama
    if family == "llama":
        model = tiny_llama(seed=3)
        model.fuse_projections()
    else:
        model = _model(family)
    others = tuple((n, "test") for n in NAMES if n != sj.NAME)
    _SwigluByReference.calls = []
    plain, kernel = plain_and_kernel_logits(model, _SwigluByReference("cuda", others))
    assert _SwigluByReference.calls
    depth = model_depth(model, 4 + 3)
    for i, (got, want) in enumerate(zip(kernel, plain)):
        assert_close(got, want, depth, f"{family} logits of forward {i}")
