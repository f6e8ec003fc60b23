"""A decode row's input norm inside its quantized projection (kernels/qmv_normed.py): its
reference against float64 numpy, its CUDA body on the CPU (g++), the kernel against its
reference on a GPU, its contract, and the model's wiring at one decode row.

Tolerance, from the kernel's roundings (as kernels/selftest_checks.py's check): y is
rounded to bf16 (bf16's unit roundoff 2**-8 of |y|, itself at most the sum of |terms|),
and each element of the norm's output may land one bf16 ulp (2**-7 of it) from the
reference's, because the sum of squares is added in another order (a last-bit change of
the rsqrt moves a value sitting at a rounding boundary); float32 sums add ~K * 2**-24.
So |y - reference| <= (2**-8 + 2**-7) * sum_k |xn_k w_nk|: a wrong row, column, group or
norm is off by O(that sum)."""
import shutil

import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np
from quantized_qwen import assert_one_row_kernel_is_rounding_only, contract_calls, quantized_qwen

import kernels.qmv_normed as qn
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

BOUND = 2.0 ** -8 + 2.0 ** -7     # of the sum of |terms|: the roundings above
EPS = 1e-6
# (N, K, group, bits): a block and a partial one, the real width (2,048 in: the joined
# Gated DeltaNet projection and attention's), K over one and two turns, 8 bits
GRID = [(40, 1024, 64, 4), (96, 2048, 64, 4), (33, 2048, 32, 4), (64, 4096, 128, 4),
        (40, 512, 64, 8), (72, 2048, 64, 8)]


def _make(seed, N, K, gs, bits=4, dtype=mx.bfloat16):
    rng = np.random.default_rng(seed)
    w32 = mx.array(rng.standard_normal((N, K)) * K ** -0.5, dtype)
    w, scales, biases = mx.quantize(w32, group_size=gs, bits=bits)
    x = mx.array(rng.standard_normal((1, K)) * 3, dtype)
    nw = mx.array(1 + 0.2 * rng.standard_normal(K), dtype)
    return x, nw, EPS, w, scales, biases, gs, bits


def _within(y, want, mag, bound) -> bool:
    y, want, mag = (np.asarray(to_np(a), np.float64) for a in (y, want, mag))
    return bool((np.abs(y - want) <= bound * mag + 1e-30).all())


@pytest.mark.parametrize("case", GRID)
def test_reference_matches_numpy(case, cpu_stream):
    """The reference's norm is mx.fast.rms_norm's to the bit, and its product a float64
    numpy product of that norm's values to float32 sums."""
    x, nw, eps, w, scales, biases, gs, bits = _make(0, *case)
    xn = qn.normed(x, nw, eps)
    assert (to_np(xn) == to_np(mx.fast.rms_norm(x, nw, eps))).all()
    wf = to_np(mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32),
                             group_size=gs, bits=bits)).astype(np.float64)
    xf = to_np(xn).astype(np.float64)
    want, mag = xf @ wf.T, np.abs(xf) @ np.abs(wf).T
    args = (x, nw, eps, w, scales, biases, gs, bits)
    assert _within(qn.reference(*args), want, mag, 1e-6)
    assert np.allclose(to_np(qn.magnitude(*args)), mag, rtol=1e-5)


@pytest.mark.parametrize("case", GRID)
def test_kernel_matches_the_reference(backend, case):
    args = _make(1, *case)
    assert qn.applies(*args[:2], *args[3:])
    y = qn.kernel(*args, backend=backend)
    assert y.shape == (1, case[0]) and y.dtype == mx.bfloat16
    assert _within(y, qn.reference(*args), qn.magnitude(*args), BOUND)


def test_kernel_in_float16_and_float32(backend):
    for dtype in (mx.float16, mx.float32):
        args = _make(2, 64, 2048, 64, dtype=dtype)
        y = qn.kernel(*args, backend=backend)
        assert y.dtype == dtype
        assert _within(y, qn.reference(*args), qn.magnitude(*args), BOUND)


def test_kernel_is_deterministic(backend):
    args = _make(3, 96, 2048, 64)
    a, b = (np.array(qn.kernel(*args, backend=backend).astype(mx.float32)) for _ in range(2))
    assert (a == b).all()


def test_planted_fault_is_caught(cpu_stream):
    """The bound tells a right product from a wrong group's scale, a shifted row or a
    missing norm weight."""
    x, nw, eps, w, scales, biases, gs, bits = _make(4, 64, 2048, 64)
    args = (x, nw, eps, w, scales, biases, gs, bits)
    want, mag = qn.reference(*args), qn.magnitude(*args)
    assert _within(want, want, mag, BOUND)
    assert not _within(qn.reference(x, nw, eps, w, scales[:, ::-1], biases, gs, bits),
                       want, mag, BOUND)
    assert not _within(mx.roll(want, 1, axis=1), want, mag, BOUND)
    assert not _within(qn.reference(x, mx.ones_like(nw), eps, w, scales, biases, gs, bits),
                       want, mag, BOUND)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_body_on_the_cpu_matches_numpy():
    """kernels/bench/cuda_on_cpu_qmv_normed.py: the body as written, blocks one by one."""
    from kernels.bench.cuda_on_cpu_qmv_normed import main
    assert main([]) == 0


def test_the_contract():
    x, nw, eps, w, scales, biases, gs, _ = _make(5, 32, 1024, 64)
    assert qn.applies(x, nw, w, scales, biases, gs, 4)
    assert not qn.applies(mx.concatenate([x, x]), nw, w, scales, biases, gs, 4)  # 2 rows
    assert not qn.applies(x, nw.astype(mx.float32), w, scales, biases, gs, 4)     # mixed
    assert not qn.applies(x, nw, w, scales, None, gs, 4)
    assert not qn.applies(x, nw, w, scales, biases, gs, 8)              # 4-bit words as 8
    assert not qn.applies(x, nw, w, scales, biases, 16, 4)
    x2, nw2, _, w2, s2, b2, _, _ = _make(6, 32, 768, 64)
    assert not qn.applies(x2, nw2, w2, s2, b2, 64, 4)                   # K % 1024
    x3, nw3, _, w3, s3, b3, _, _ = _make(7, 32, 8192, 64)
    assert not qn.applies(x3, nw3, w3, s3, b3, 64, 4)                   # past MAX_K


def test_the_dispatch_declines_outside_the_contract(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(qn, "kernel", refuse)
    x, nw, eps, w, scales, biases, gs, _ = _make(8, 32, 1024, 64)
    assert NO_KERNELS.qmv_normed(x, nw, eps, w, scales, biases, gs, 4) is None
    assert KernelSet("metal").qmv_normed(x, nw, eps, w, scales, biases, gs, 4) is None
    two = mx.concatenate([x, x])
    assert KernelSet("cuda").qmv_normed(two, nw, eps, w, scales, biases, gs, 4) is None


def test_one_launch():
    x, nw, eps, w, scales, biases, gs, _ = _make(9, 32, 1024, 64)
    with gpu_graph() as ledger:
        y = KernelSet(COUNT).qmv_normed(x, nw, eps, w, scales, biases, gs, 4)
    assert ledger.calls == {"qmv_normed": 1} and y.shape == (1, 32)


class _NormedAsMlx(KernelSet):
    """The kernel's contract on any machine: where it applies, MLX's own norm and product
    (the plain path's ops, so the logits must not move at all) and a note of the call."""
    calls = []

    def qmv_normed(self, x, norm_weight, eps, w, scales, biases, group_size, bits):
        if not qn.applies(x, norm_weight, w, scales, biases, group_size, bits):
            return None
        self.calls.append((x.shape[0], w.shape[0], bits))
        return mx.quantized_matmul(mx.fast.rms_norm(x, norm_weight, eps), w, scales, biases,
                                   transpose=True, group_size=group_size, bits=bits)


def test_each_layers_input_norm_goes_into_its_projection_at_one_decode_row():
    """Wiring: a prompt and three decode steps of one row through the kernel's contract
    give the plain path's logits bit for bit, and each decode step's layers (2 Gated
    DeltaNet, 2 attention) took their input norm inside the joined input projection
    (the prompt's 4 tokens never did); the final norm went into the head wherever one
    row's logits were asked for (the prompt's last token and each step)."""
    model = quantized_qwen(1024)
    calls = contract_calls(model, _NormedAsMlx, qn.NAME)
    layers, vocab = model.args.num_hidden_layers, model.args.vocab_size
    assert {m for m, _, _ in calls} == {1}
    assert len([c for c in calls if c[1] == vocab]) == 1 + 3            # the head
    assert len([c for c in calls if c[1] != vocab]) == 3 * layers
    assert len({n for _, n, _ in calls if n != vocab}) == 2      # GDN's width, attention's


def test_the_model_decodes_one_row_through_the_kernel_as_without_it(backend):
    """The real launches inside a float32 4-bit model (float32 scales: MLX's own product
    sums in float32 too), every other kernel on both times: the logits of a prompt and
    three decode steps differ by float32 reordering only (tests/float32_tolerance.py)."""
    assert_one_row_kernel_is_rounding_only(backend, qn.NAME)
