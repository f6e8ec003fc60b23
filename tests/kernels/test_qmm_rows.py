"""The 4- and 8-bit matmul for decode batches (kernels/qmm_rows.py): its reference against a
float64 numpy product, its CUDA body on the CPU (g++, the tensor-core product emulated
by the PTX layout), the kernel against numpy on a GPU, and the model's projections
through it where it applies.

Tolerance, from the kernel's roundings: each weight is rounded to bf16 before the
tensor cores multiply it (2**-9 of its value at most) and y is rounded to bf16 (2**-9 of
|y|, itself at most the sum of |terms|), float32 sums add ~K * 2**-24. So |y - exact|
<= 2**-8 * sum_k |x_k w_nk|: a wrong row, column, group or k is off by O(that sum)."""
import shutil

import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np
from quantized_qwen import quantized_qwen

import kernels.qmm_rows as qr
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

BOUND = 2.0 ** -8       # of the sum of |terms|: the roundings above
# (M, N, K, group, bits): one tile, a partial one, two tiles with a partial second, the
# real widths (2,048 and 4,096 in), K split over 1, 2 and 8 warps; 8 bits (the router)
GRID = [(2, 16, 128, 32, 4), (5, 48, 1024, 64, 4), (16, 32, 256, 64, 4),
        (19, 256, 2048, 64, 4), (32, 32, 4096, 128, 4), (3, 32, 256, 64, 8),
        (16, 384, 2048, 64, 8)]


def _make(seed, M, N, K, gs, bits=4):
    rng = np.random.default_rng(seed)
    w32 = mx.array(rng.standard_normal((N, K)) * K ** -0.5, mx.bfloat16)
    w, scales, biases = mx.quantize(w32, group_size=gs, bits=bits)
    x = mx.array(rng.standard_normal((M, K)), mx.bfloat16)
    return x, w, scales, biases, gs, bits


def _numpy(x, w, scales, biases, gs, bits):
    """float64 (x @ W.T, sum |x| @ |W|.T), the weights unpacked by hand."""
    wn = to_np(w).astype(np.uint64)
    shifts = bits * np.arange(32 // bits, dtype=np.uint64)
    q = ((wn[..., None] >> shifts) & ((1 << bits) - 1)).reshape(wn.shape[0], -1)
    wf = (np.repeat(to_np(scales).astype(np.float64), gs, 1) * q
          + np.repeat(to_np(biases).astype(np.float64), gs, 1))
    xf = to_np(x).astype(np.float64)
    return xf @ wf.T, np.abs(xf) @ np.abs(wf).T


def _within(y, want, mag, bound) -> bool:
    return bool((np.abs(to_np(y).astype(np.float64) - want) <= bound * mag + 1e-30).all())


@pytest.mark.parametrize("case", GRID)
def test_reference_matches_numpy(case, cpu_stream):
    args = _make(0, *case)
    want, mag = _numpy(*args)
    assert _within(qr.reference(*args), want, mag, 1e-6)      # float32 sums, unrounded


@pytest.mark.parametrize("layout", ["shape", "uniform"])
@pytest.mark.parametrize("case", GRID)
def test_kernel_matches_numpy(backend, case, layout, monkeypatch):
    """GRID's narrow N take one tile a warp by shape; "uniform" runs NT tiles, `split`."""
    monkeypatch.setattr(qr, "LAYOUT", layout)
    args = _make(1, *case)
    assert qr.applies(*args)
    y = qr.kernel(*args, backend=backend)
    assert y.shape == (case[0], case[1]) and y.dtype == mx.bfloat16
    assert _within(y, *_numpy(*args), BOUND)


# The model's projections (N, K): GDN in_proj, out_proj, attention qkv, o_proj, the head,
# the 8-bit router+gate; and the layout session 47's sweep chose for each at one row tile
# (M <= 16) and two (M > 16)
MODEL = {(12416, 2048): ((2, 8), (4, 4)), (2048, 4096): ((2, 16), (2, 16)),
         (9216, 2048): ((2, 8), (4, 4)), (248320, 2048): ((4, 4), (4, 4)),
         (384, 2048): ((1, 8), (1, 8))}


@pytest.mark.parametrize("M", [2, 16, 17, 32])
@pytest.mark.parametrize("shape", list(MODEL))
def test_layout_takes_the_sweeps_choice_for_the_models_projections(shape, M):
    N, K = shape
    assert qr.layout(M, N, K) == MODEL[shape][M > 16]


def test_every_layout_fits_and_uniform_is_the_old_one(monkeypatch):
    for M in range(qr.MIN_ROWS, qr.MAX_ROWS + 1):
        for N, K in [*MODEL, (16, 128), (8192, 512), (65536, 4096), (4096, 8192)]:
            assert qr.layout_fits(M, N, K, *qr.layout(M, N, K))
    monkeypatch.setattr(qr, "LAYOUT", "uniform")
    for N, K in MODEL:
        assert qr.layout(16, N, K) == qr.layout(32, N, K) == (qr.NT, qr.split(K))


def test_a_rule_that_does_not_fit_falls_back_to_the_old_layout():
    assert qr.layout(16, 65536 + 16, 2048) == (qr.NT, 8)        # N not whole 4-tile blocks
    assert qr.layout(32, 8192 + 16, 2048) == (qr.NT, 8)
    assert qr.layout(32, 8192, 256) == (qr.NT, 2)               # 2 of K's blocks for 4 warps
    assert qr.layout(16, 65536, 512) == (4, 4)                  # 4 blocks: fits
    assert qr.layout(16, 4096 + 16, 4096) == (qr.NT, 8)         # past SHORT_N: no 16 warps
    assert qr.layout(16, 2048, 2048) == (qr.NT, 8)              # K short of LONG_K


# (M, N, K, group, bits) -> the rule's layout: one tile (narrow, 8 bits), 16 warps
# (K=4096), 4 tiles 4 warps (two row tiles from WIDE_N; the head's width at one row tile)
RULE_CASES = {(2, 384, 2048, 64, 8): (1, 8), (16, 2048, 4096, 64, 4): (2, 16),
              (19, 8192, 1024, 64, 4): (4, 4), (4, 65536, 512, 64, 4): (4, 4)}


@pytest.mark.parametrize("case", list(RULE_CASES))
def test_the_rules_layouts_match_numpy(backend, case):
    assert qr.layout(*case[:3]) == RULE_CASES[case]
    args = _make(1, *case)
    assert _within(qr.kernel(*args, backend=backend), *_numpy(*args), BOUND)


def test_a_layout_fits_whole_blocks_warps_with_k_to_read_and_shared_memory():
    assert qr.layout_fits(16, 2048, 4096, qr.NT, qr.split(4096))          # the default
    assert qr.layout_fits(16, 8, 1024, 1, 8)                              # one tile a warp
    assert not qr.layout_fits(16, 8, 1024, 2, 8)                          # 8 columns, 16 a block
    assert qr.layout_fits(16, 16, 2048, 2, 16)                            # 128 weights a warp
    assert not qr.layout_fits(16, 16, 1024, 2, 16)                        # a warp with no K
    assert not qr.layout_fits(16, 16, 8192, 2, 64)                        # 2,048 threads
    assert not qr.layout_fits(32, 64, 2048, 8, 8)                         # 64 KB of sums


def test_the_sweep_tries_the_default_first_and_only_layouts_that_fit():
    from kernels.bench.qmm_rows_sweep import layouts
    found = layouts(16, 2048, 4096)
    assert found[0] == qr.layout(16, 2048, 4096) == (2, 16)
    assert len(set(found)) == len(found) > 4
    assert all(qr.layout_fits(16, 2048, 4096, nt, ks) for nt, ks in found)
    x, w, scales, biases, gs, _ = _make(3, 4, 16, 256, 64)
    with pytest.raises(ValueError, match="do not fit"):
        qr.kernel(x, w, scales, biases, gs, backend="cuda", nt=4)        # 32 columns a block


@pytest.mark.parametrize("nt,ksplit", [(1, 4), (1, 16), (2, 16), (4, 4)])
def test_the_sweeps_layouts_match_numpy(backend, nt, ksplit):
    """The layouts kernels/bench/qmm_rows_sweep.py times, within the same bound."""
    for case in [(16, 64, 2048, 64, 4), (19, 32, 2048, 64, 8)]:
        args = _make(4, *case)
        y = qr.kernel(*args, backend=backend, nt=nt, ksplit=ksplit)
        assert _within(y, *_numpy(*args), BOUND)


def test_kernel_is_deterministic(backend):
    args = _make(2, 19, 256, 2048, 64)
    a, b = (np.array(qr.kernel(*args, backend=backend).astype(mx.float32)) for _ in range(2))
    assert (a == b).all()


def test_planted_fault_is_caught(cpu_stream):
    """The bound tells a right product from a wrong group's scale or a shifted column."""
    x, w, scales, biases, gs, bits = _make(3, 16, 32, 256, 64)
    want, mag = _numpy(x, w, scales, biases, gs, bits)
    y = qr.reference(x, w, scales, biases, gs, bits)
    assert _within(y, want, mag, BOUND)
    assert not _within(qr.reference(x, w, scales[:, ::-1], biases, gs, bits), want, mag, BOUND)
    assert not _within(mx.roll(y, 1, axis=1), want, mag, BOUND)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_body_on_the_cpu_matches_numpy():
    """kernels/bench/cuda_on_cpu_qmm.py: the body as written, its mma by the PTX layout."""
    from kernels.bench.cuda_on_cpu_qmm import main
    assert main([]) == 0


def test_the_contract():
    x, w, scales, biases, gs, _ = _make(4, 16, 32, 256, 64)
    assert qr.applies(x, w, scales, biases, gs, 4)
    assert not qr.applies(x[:1], w, scales, biases, gs, 4)              # one row: MLX's qmv
    big = mx.zeros((33, 256), mx.bfloat16)
    assert not qr.applies(big, w, scales, biases, gs, 4)                # past two tiles
    assert not qr.applies(x.astype(mx.float32), w, scales, biases, gs, 4)
    assert not qr.applies(x, w, scales, None, gs, 4)
    assert not qr.applies(x, w, scales, biases, gs, 8)                  # 4-bit words read as 8
    assert not qr.applies(x, w, scales, biases, gs, 2)
    w2, s2, b2 = mx.quantize(mx.zeros((24, 256), mx.bfloat16), group_size=64, bits=4)
    assert not qr.applies(x, w2, s2, b2, 64, 4)                          # N % 16
    w3, s3, b3 = mx.quantize(mx.zeros((32, 192), mx.bfloat16), group_size=64, bits=4)
    assert not qr.applies(x[:, :192], w3, s3, b3, 64, 4)                 # K % 128


def test_the_dispatch_declines_outside_the_contract(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(qr, "kernel", refuse)
    x, w, scales, biases, gs, _ = _make(5, 4, 32, 256, 64)
    assert NO_KERNELS.qmm_rows(x, w, scales, biases, gs, 4) is None
    ks = KernelSet("cuda")
    assert ks.qmm_rows(x[:1], w, scales, biases, gs, 4) is None
    assert ks.qmm_rows(x.astype(mx.float32), w, scales, biases, gs, 4) is None


def test_one_launch_keeps_the_leading_axes():
    x, w, scales, biases, gs, _ = _make(6, 8, 32, 256, 64)
    with gpu_graph() as ledger:
        y = KernelSet(COUNT).qmm_rows(x.reshape(8, 1, 256), w, scales, biases, gs, 4)
    assert ledger.calls == {"qmm_rows": 1} and y.shape == (8, 1, 32)


class _QmmAsMlx(KernelSet):
    """The kernel's contract on any machine: where it applies, MLX's own product (the
    plain path's op, so the logits must not move at all) and a note of the call."""
    calls = []

    def qmm_rows(self, x, w, scales, biases, group_size, bits):
        rows = x.reshape(-1, x.shape[-1])
        if not qr.applies(rows, w, scales, biases, group_size, bits):
            return None
        self.calls.append((rows.shape[0], w.shape[0], bits))
        return mx.quantized_matmul(x, w, scales, biases, transpose=True,
                                   group_size=group_size, bits=bits)


def test_the_models_projections_go_through_the_kernel_where_it_applies():
    """Wiring: a prefill and decode steps of two rows through the kernel's contract give
    the plain path's logits bit for bit, and the decode steps' joined input projections,
    output projections, 8-bit router gates and head went through it."""
    from kernel_wiring import plain_and_kernel_logits
    # hidden 128 (K % 128 == 0); 15 experts, so the 8-bit router and shared-expert gate
    # join to 16 rows (a GPU pads them)
    model = quantized_qwen(128, num_experts=15)
    others = tuple((n, "test") for n in NAMES if n != qr.NAME)
    plain, kernel = plain_and_kernel_logits(model, _QmmAsMlx("cuda", others))
    for got, want in zip(kernel, plain):
        assert (got == want).all()
    widths = {n for m, n, _ in _QmmAsMlx.calls if m == 2}
    text = model.args
    assert text.hidden_size in widths                   # out_proj / o_proj
    assert any(n > text.hidden_size for n in widths)    # a joined input projection or the head
    assert {b for m, _, b in _QmmAsMlx.calls if m == 2} == {4, 8}      # the router's 8 bits
