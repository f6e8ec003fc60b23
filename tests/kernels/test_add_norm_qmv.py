"""A decode row's residual add, its norm and the MoE router's product in one launch
(kernels/add_norm_qmv.py): its reference against float64 numpy and against the two
launches it replaces, its CUDA body on the CPU (g++), the kernel against its reference on
a GPU, its contract, and the model's wiring at one decode row.

Tolerance, from the kernel's roundings (as kernels/selftest_checks.py's check): h is the
add's own rounding, so exact; each element of hn may land one ulp (2**-7 of it at bf16)
from the reference's, because the sum of squares is added in another order; y is rounded
to bf16 (2**-8 of |y|, itself at most the sum of |terms|) from a sum over those hn. So
|y - reference| <= (2**-8 + 2**-7) * sum_k |hn_k w_nk|: a wrong row, column, group, norm
or residual is off by O(that sum)."""
import shutil

import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np
from quantized_qwen import assert_one_row_kernel_is_rounding_only, contract_calls, quantized_qwen

import kernels.add_norm_qmv as anq
import kernels.add_rms_norm as arn
from kernels.backend import OFF_AT_LOAD
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

BOUND = 2.0 ** -8 + 2.0 ** -7     # of the sum of |terms|: the roundings above
EPS = 1e-6
# (N, K, group, bits): the router's shape (257 rows of 2,048 at 8 bits), a block and a
# partial one at 4 bits, K over one and several turns
GRID = [(257, 2048, 64, 8), (40, 1024, 64, 4), (96, 2048, 32, 4), (40, 512, 64, 8)]


def _make(seed, N, K, gs, bits=4, dtype=mx.bfloat16):
    rng = np.random.default_rng(seed)
    w32 = mx.array(rng.standard_normal((N, K)) * K ** -0.5, dtype)
    w, scales, biases = mx.quantize(w32, group_size=gs, bits=bits)
    x = mx.array(rng.standard_normal((1, K)) * 3, dtype)
    r = mx.array(rng.standard_normal((1, K)) * 2, dtype)
    nw = mx.array(1 + 0.2 * rng.standard_normal(K), dtype)
    return x, r, nw, EPS, w, scales, biases, gs, bits


def _within(y, want, mag, bound) -> bool:
    y, want, mag = (np.asarray(to_np(a), np.float64) for a in (y, want, mag))
    return bool((np.abs(y - want) <= bound * mag + 1e-30).all())


@pytest.mark.parametrize("case", GRID)
def test_reference_is_add_rms_norm_then_a_float64_product(case, cpu_stream):
    """The reference's h and hn are kernels/add_rms_norm's reference to the bit (the
    launch this replaces), and its product a float64 numpy product of those hn values to
    float32 sums."""
    x, r, nw, eps, w, scales, biases, gs, bits = _make(0, *case)
    h, hn, y = anq.reference(x, r, nw, eps, w, scales, biases, gs, bits)
    h_arn, hn_arn = arn.reference(x, r, nw, eps)
    assert (to_np(h) == to_np(h_arn)).all() and (to_np(hn) == to_np(hn_arn)).all()
    wf = to_np(mx.dequantize(w, scales.astype(mx.float32), biases.astype(mx.float32),
                             group_size=gs, bits=bits)).astype(np.float64)
    hf = to_np(hn).astype(np.float64)
    want, mag = hf @ wf.T, np.abs(hf) @ np.abs(wf).T
    assert _within(y, want, mag, 1e-6)
    assert np.allclose(to_np(anq.magnitude(x, r, nw, eps, w, scales, biases, gs, bits)),
                       mag, rtol=1e-5)


def _check_launch(args, backend):
    h, hn, y = anq.kernel(*args, backend=backend)
    h_want, hn_want, want = anq.reference(*args)
    assert (to_np(h) == to_np(h_want)).all()
    hn_f, hn_w = (to_np(a.astype(mx.float32)).astype(np.float64) for a in (hn, hn_want))
    assert (np.abs(hn_f - hn_w) <= 2.0 ** -7 * np.abs(hn_w) + 1e-30).all()
    assert _within(y, want, anq.magnitude(*args), BOUND)
    return h, hn, y


@pytest.mark.parametrize("case", GRID)
def test_kernel_matches_the_reference(backend, case):
    args = _make(1, *case)
    assert anq.applies(*args[:3], *args[4:])
    h, hn, y = _check_launch(args, backend)
    assert y.shape == (1, case[0]) and h.shape == hn.shape == (1, case[1])
    assert y.dtype == h.dtype == hn.dtype == mx.bfloat16


def test_kernel_in_float16_and_float32(backend):
    for dtype in (mx.float16, mx.float32):
        h, _, _ = _check_launch(_make(2, 64, 2048, 64, dtype=dtype), backend)
        assert h.dtype == dtype


def test_planted_fault_is_caught(cpu_stream):
    """The bound tells a right product from a wrong group's scale, a shifted row, a
    missing norm weight or a missing residual."""
    x, r, nw, eps, w, scales, biases, gs, bits = _make(4, 64, 2048, 64)
    args = (x, r, nw, eps, w, scales, biases, gs, bits)
    _, _, want = anq.reference(*args)
    mag = anq.magnitude(*args)
    assert _within(want, want, mag, BOUND)
    for wrong in ((x, r, nw, eps, w, scales[:, ::-1], biases, gs, bits),
                  (x, r, mx.ones_like(nw), eps, w, scales, biases, gs, bits),
                  (x, mx.zeros_like(r), nw, eps, w, scales, biases, gs, bits)):
        assert not _within(anq.reference(*wrong)[2], want, mag, BOUND)
    assert not _within(mx.roll(want, 1, axis=1), want, mag, BOUND)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_body_on_the_cpu_matches_numpy():
    """kernels/bench/cuda_on_cpu_qmv_normed.py's residual cases: the body as written,
    blocks one by one, y and the h and hn block 0 writes, the router's 257 rows."""
    from kernels.bench.cuda_on_cpu_qmv_normed import RESIDUAL_CASES, emulate
    from kernels.bench.cuda_shim import run_cases
    assert run_cases(emulate, RESIDUAL_CASES) == 0


def test_the_contract_and_the_dispatch(monkeypatch):
    x, r, nw, eps, w, scales, biases, gs, _ = _make(5, 32, 1024, 64)
    assert anq.applies(x, r, nw, w, scales, biases, gs, 4)
    assert not anq.applies(x, mx.concatenate([r, r]), nw, w, scales, biases, gs, 4)
    assert not anq.applies(x, r.astype(mx.float32), nw, w, scales, biases, gs, 4)
    two = mx.concatenate([x, x])
    assert not anq.applies(two, mx.concatenate([r, r]), nw, w, scales, biases, gs, 4)

    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(anq, "kernel", refuse)
    assert NO_KERNELS.add_norm_qmv(x, r, nw, eps, w, scales, biases, gs, 4) is None
    assert KernelSet("metal").add_norm_qmv(x, r, nw, eps, w, scales, biases, gs, 4) is None


def test_one_launch_and_off_at_load_until_timed():
    x, r, nw, eps, w, scales, biases, gs, _ = _make(9, 32, 1024, 64)
    with gpu_graph() as ledger:
        h, hn, y = KernelSet(COUNT).add_norm_qmv(x, r, nw, eps, w, scales, biases, gs, 4)
    assert ledger.calls == {"add_norm_qmv": 1} and y.shape == (1, 32)
    assert h.shape == hn.shape == (1, 1024)
    assert anq.NAME in OFF_AT_LOAD        # until a GPU has timed it against the two launches


class _AddNormAsMlx(KernelSet):
    """The kernel's contract on any machine: where it applies, the two launches it
    replaces (add_rms_norm's plain ops and MLX's product: the plain path's ops, so the
    logits must not move at all) and a note of the call."""
    calls = []

    def add_norm_qmv(self, x, r, norm_weight, eps, w, scales, biases, group_size, bits):
        if not anq.applies(x, r, norm_weight, w, scales, biases, group_size, bits):
            return None
        self.calls.append((x.shape[0], w.shape[0], bits))
        h = x + r
        hn = mx.fast.rms_norm(h, norm_weight, eps)
        return h, hn, mx.quantized_matmul(hn, w, scales, biases, transpose=True,
                                          group_size=group_size, bits=bits)


def test_each_moe_layers_add_norm_and_router_are_one_launch_at_one_decode_row():
    """Wiring: a prompt and three decode steps of one row through the kernel's contract
    give the plain path's logits bit for bit, and in each decode step every MoE layer
    took its add, norm and router in the one call (the prompt's 4 tokens never did)."""
    model = quantized_qwen(1024)
    calls = contract_calls(model, _AddNormAsMlx, anq.NAME)
    router_rows = model.layers[0].mlp.gates.joined.weight.shape[0]
    assert calls == [(1, router_rows, model.layers[0].mlp.gates.joined.bits)] * (
        3 * model.args.num_hidden_layers)


def test_the_model_decodes_one_row_through_the_kernel_as_without_it(backend):
    """The real launches inside a float32 4-bit model, every other kernel on both times:
    the logits of a prompt and three decode steps differ by float32 reordering only
    (tests/float32_tolerance.py)."""
    assert_one_row_kernel_is_rounding_only(backend, anq.NAME)
