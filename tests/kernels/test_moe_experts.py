"""Routed experts as gathered matrix-vector products (kernels/moe_experts.py) against an
independent float64 numpy reference (nibbles unpacked by hand, not mx.dequantize)."""
import shutil

import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.moe_experts as me
from engine.loading import cuda_qmm_guard
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.selftest_checks_moe import random_experts
from kernels.stand_in import COUNT, gpu_graph

# (N, E, K, D, I, group, pad rows): the real shapes (D 2048, I 512, top-8, group 64) at
# 8 experts; fewer chunks than lanes; k=10 (Qwen3-Next); group 32 and 128; GPU row padding.
GRID = [(1, 8, 8, 2048, 512, 64, 0), (3, 8, 4, 256, 256, 64, 128), (2, 12, 10, 96, 128, 32, 0),
        (5, 8, 2, 256, 128, 128, 0), (16, 32, 8, 128, 64, 64, 0)]
# the block's shared expert and residual: neither, both, each (GRID[1]; GRID[0] with both)
EXTRAS = [(False, False), (True, True), (True, False), (False, True)]
DTYPES = [mx.float32, mx.bfloat16]
ULP32 = 2.0 ** -24


def _make(seed, N, E, K, D, hidden, group, pad, dtype, shared=False, residual=False):
    """(x, idx, scores, experts, shared_gate, residual): scores and the shared gate strided
    views (a router output's columns), as the model hands them over."""
    experts = random_experts(mx.random.key(seed), E, D, hidden, group, pad)
    rng = np.random.default_rng(seed)
    x = mx.array(rng.standard_normal((N, D)), dtype=dtype)
    idx = mx.array(np.stack([rng.choice(E, K, replace=False) for _ in range(N)]), mx.uint32)
    wide = mx.array(np.concatenate([rng.dirichlet(np.ones(K), size=N),
                                    rng.standard_normal((N, 2))], axis=1), dtype=dtype)
    scores, gate = wide[:, :K], wide[:, K:K + 1]
    if shared:
        one = random_experts(mx.random.key(seed + 100), 1, D, hidden, group, pad)
        experts = me.QuantExperts(experts.gate_up, experts.down, hidden, group,
                                  shared=(tuple(a[0] for a in one.gate_up),
                                          tuple(a[0] for a in one.down)))
    res = mx.array(rng.standard_normal((N, D)), dtype=dtype) if residual else None
    return x, idx, scores, experts, gate if shared else None, res


def _expected(x, idx, scores, experts, shared_gate=None, residual=None):
    shared = None if experts.shared is None else [[to_np(a) for a in part]
                                                  for part in experts.shared]
    return numpy_ref.moe_experts(to_np(x), to_np(idx), to_np(scores),
                                 [to_np(a) for a in experts.gate_up],
                                 [to_np(a) for a in experts.down], experts.hidden, shared,
                                 None if shared_gate is None else to_np(shared_gate),
                                 None if residual is None else to_np(residual))


def _close(y, want, mag, dtype) -> bool:
    """Float32 sums: within 64 ulps of the sum of |terms| (a wrong row or expert is off
    by O(that sum)); a bf16 output adds its own rounding, 2**-8 relative at most."""
    rtol = 2.0 ** -8 if dtype == mx.bfloat16 else 0.0
    return numpy_ref.close(to_np(y), want, 64 * ULP32 * mag + 1e-30, rtol)


CASES = [(c, False, False) for c in GRID] + [(GRID[1], s, r) for s, r in EXTRAS[1:]] + [
    (GRID[0], True, True)]


@pytest.mark.parametrize("case, shared, residual", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, shared, residual, dtype, cpu_stream):
    args = _make(0, *case, dtype, shared, residual)
    assert _close(me.reference(*args), *_expected(*args), dtype)


@pytest.mark.parametrize("case, shared, residual", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, case, shared, residual, dtype):
    args = _make(1, *case, dtype, shared, residual)
    assert me.applies(args[0], args[1], *args[3:])
    assert _close(me.kernel(*args, backend=backend), *_expected(*args), dtype)


@pytest.mark.parametrize("case, shared, residual", CASES)
@pytest.mark.parametrize("setting", [("DEDUPE_FROM_PAIRS", 1), ("TILE_MAJOR", not me.TILE_MAJOR),
                                     ("STAGED", not me.STAGED),
                                     ("STAGED_DOWN", not me.STAGED_DOWN)])
def test_dedupe_and_tile_major_match_numpy_on_the_gpu(backend, case, shared, residual,
                                                      setting, monkeypatch):
    """DEDUPE (off: measured slower), the grid order other than the default (TILE_MAJOR)
    and each launch staging its rows or not (STAGED, STAGED_DOWN) on the GPU: the
    reference's tolerance, and bit for bit the default kernels."""
    if backend != "cuda":
        pytest.skip("DEDUPE, TILE_MAJOR and STAGED are in the CUDA source only")
    args = _make(1, *case, mx.bfloat16, shared, residual)
    without = me.kernel(*args, backend=backend)
    monkeypatch.setattr(me, *setting)
    with_ = me.kernel(*args, backend=backend)
    assert _close(with_, *_expected(*args), mx.bfloat16)
    assert np.array_equal(to_np(with_), to_np(without))


def test_dispatcher_matches_numpy(backend):
    args = _make(2, 4, 16, 8, 2048, 512, 64, 0, mx.bfloat16, True, True)
    assert _close(KernelSet(backend).moe_experts(*args), *_expected(*args), mx.bfloat16)


def test_planted_fault_is_caught():
    args = _make(3, 2, 8, 4, 256, 256, 64, 0, mx.float32, True, True)
    with mx.stream(mx.cpu):
        y = np.array(to_np(me.reference(*args)))
    want, mag = _expected(*args)
    assert _close(mx.array(y), want, mag, mx.float32)
    y[1, 7] += 1e-3 * np.abs(want).max()                  # one element, slightly off
    assert not _close(mx.array(y), want, mag, mx.float32)


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(me, "kernel", refuse)
    x, idx, scores, experts, _, _ = _make(4, 2, 8, 4, 256, 256, 64, 0, mx.float32)
    ks = KernelSet("cuda")
    assert NO_KERNELS.moe_experts(x, idx, scores, experts) is None
    many = mx.zeros((me.MAX_PAIRS // 4 + 1, 256))              # a prefill chunk's tokens
    assert ks.moe_experts(many, mx.zeros((many.shape[0], 4), mx.uint32),
                          mx.zeros((many.shape[0], 4)), experts) is None
    eight_bit = me.QuantExperts(experts.gate_up, experts.down, 256, 64, bits=8)
    assert ks.moe_experts(x, idx, scores, eight_bit) is None
    no_bias = me.QuantExperts(experts.gate_up[:2] + (None,), experts.down, 256, 64)
    assert ks.moe_experts(x, idx, scores, no_bias) is None
    assert ks.moe_experts(x[:, :200], idx, scores, experts) is None   # D of other experts
    _, _, _, with_shared, gate, _ = _make(4, 2, 8, 4, 256, 256, 64, 0, mx.float32, True)
    assert ks.moe_experts(x, idx, scores, with_shared) is None        # no shared gate
    assert ks.moe_experts(x, idx, scores, experts, residual=x[:1]) is None


def test_the_real_decode_shapes_apply():
    experts = me.QuantExperts(
        (mx.zeros((256, 1024, 256), mx.uint32), mx.zeros((256, 1024, 32)), mx.zeros((256, 1024, 32))),
        (mx.zeros((256, 2048, 64), mx.uint32), mx.zeros((256, 2048, 8)), mx.zeros((256, 2048, 8))),
        512, 64)
    for B in (1, 2, 4, 8, 16, 32):
        assert me.applies(mx.zeros((B, 2048)), mx.zeros((B, 8), mx.uint32), experts), B
    assert not me.applies(mx.zeros((64, 2048)), mx.zeros((64, 8), mx.uint32), experts)


def _moe_block(seed=0):
    import mlx.nn as nn

    from engine.models.moe import SparseMoeBlock
    mx.random.seed(seed)
    block = SparseMoeBlock(dims=128, hidden=64, shared_hidden=64, num_experts=16, top_k=4,
                           norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()                  # as at load: gate+up joined
    # as at load: on CUDA the shared expert's down projection (K = 64 = its group) goes
    # dense, around MLX's one-group quantized matmul (tests/kernels/test_mlx_cuda_qmm_...)
    cuda_qmm_guard.apply(block)
    return block


def _only_experts(backend):
    return KernelSet(backend, tuple((n, "test") for n in NAMES if n != me.NAME))


def test_the_moe_block_hands_its_experts_to_the_kernel_as_its_plain_path_reads_them(
        monkeypatch):
    """Wiring, on any machine: the kernel's contract (its reference) on the block's own
    joined experts gives the block's plain output (gate/up order, scores, indices)."""
    calls = []
    monkeypatch.setattr(me, "kernel", lambda *a, backend: calls.append(backend)
                        or me.reference(*a))
    block = _moe_block()
    x = mx.random.normal((3, 1, 128), key=mx.random.key(1))
    residual = mx.random.normal((3, 1, 128), key=mx.random.key(2))
    plain = [block(x), block(x, residual)]
    block.kernel_set = _only_experts("cuda")
    routed = [block(x), block(x, residual)]
    assert calls == ["cuda", "cuda"]
    for got, want in zip(routed, plain):
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)


def test_the_moe_block_counts_two_launches_for_its_experts():
    block = _moe_block()
    block.kernel_set = _only_experts(COUNT)
    with gpu_graph() as ledger:
        block(mx.zeros((2, 1, 128)))
    assert ledger.calls == {"moe_experts": 2}


def test_the_moe_block_on_the_kernel_matches_its_plain_path(backend):
    block = _moe_block()
    x = mx.random.normal((4, 1, 128), key=mx.random.key(2))
    residual = mx.random.normal((4, 1, 128), key=mx.random.key(3))
    plain = np.array(block(x, residual))
    block.kernel_set = _only_experts(backend)
    np.testing.assert_allclose(np.array(block(x, residual)), plain, rtol=1e-4, atol=1e-4)


# (N, E, K, D, I, group, pad, shared), the settings: 5 tokens choosing 4 of 8 experts (most
# pairs repeat an expert an earlier token chose) with the shared expert; 3 tokens, padded
# rows; both grids row-tile-major, alone and with DEDUPE
ORDER_CASES = [((5, 8, 4, 128, 64, 64, 0, True), {"dedupe": True}),
               ((3, 8, 4, 128, 64, 32, 64, False), {"dedupe": True}),
               ((5, 8, 4, 128, 64, 64, 0, True), {"tile_major": True}),
               ((5, 8, 4, 128, 64, 64, 0, True), {"tile_major": True, "dedupe": True}),
               # launch 1's rows staged in shared memory: fewer chunks than lanes, two a lane
               ((3, 8, 4, 256, 64, 64, 32, False), {"staged": True}),
               ((2, 8, 4, 2048, 64, 64, 0, True), {"staged": True}),
               ((5, 8, 4, 128, 64, 64, 0, True), {"staged": True, "tile_major": True,
                                                  "dedupe": True}),
               # launch 2's rows staged: its chunks over lanes unevenly, the shared expert's
               ((2, 12, 10, 96, 128, 32, 0, True), {"staged_down": True}),
               ((5, 8, 4, 128, 64, 64, 0, True), {"staged_down": True, "staged": True,
                                                  "tile_major": True})]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
@pytest.mark.parametrize("case, settings", ORDER_CASES)
def test_reading_each_expert_once_or_tile_major_changes_no_float(case, settings):
    """kernels/bench/cuda_on_cpu.py runs the CUDA bodies as written (a block's threads as
    std::threads): with DEDUPE the first token to choose an expert runs every later
    token's rows of it; with TILE_MAJOR the grids run in another order. Each (token, row)
    sum is the same floats as without, so y is bit for bit the same (~10 s a case)."""
    from kernels.bench.cuda_on_cpu import emulate
    *shape, shared = case
    with_, without = [], []
    emulate(*shape, seed=3, shared=shared, out=with_, **settings)
    emulate(*shape, seed=3, shared=shared, out=without)
    assert np.array_equal(with_[0], without[0])


# Planted faults, each in the part it checks (1: launch 1, 2: launch 2), and the case and
# setting that run the planted code:
# - DEDUPE: the owner warp writing every token's rows to its own slot (j, not jt);
# - STAGED: a gate row's piece read from an up row's slot (the shim copies at once, so only
#   the slots' layout is checked on the CPU; the copies' timing is cp.async.wait_group's);
# - STAGED_DOWN: a piece copied from the row after its own.
PLANTED = [(1, "(size_t(tok) * KK + jt)", "(size_t(tok) * KK + j)", 0, "dedupe"),
           (1, "qg[r] = st[(it * 2 * RPW + r) * 32];",
            "qg[r] = st[(it * 2 * RPW + RPW + r) * 32];", 5, "staged"),
           (2, "(wm + (base + d0 + r) * WPR)", "(wm + (base + d0 + r + 1) * WPR)", 7,
            "staged_down")]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
@pytest.mark.parametrize("part, old, new, case, setting", PLANTED)
def test_a_planted_fault_is_caught(part, old, new, case, setting, monkeypatch):
    """The check of the check: each fault above changes y against the same kernels
    without the setting, where the bit-for-bit test found no change."""
    import kernels.moe_experts_src as mes
    from kernels.bench.cuda_on_cpu import emulate
    sources = list(mes._SOURCES["cuda"])
    planted = sources[part].replace(old, new)
    assert planted != sources[part]
    sources[part] = planted
    monkeypatch.setitem(mes._SOURCES, "cuda", tuple(sources))
    *shape, shared = ORDER_CASES[case][0]
    with_, without = [], []
    emulate(*shape, seed=3, shared=shared, out=with_, **{setting: True})
    emulate(*shape, seed=3, shared=shared, out=without)
    assert not np.array_equal(with_[0], without[0])


def test_staged_launch_1_fits_its_shared_memory(monkeypatch):
    """STAGED asks for each warp's 2 RPW1 rows of 16-byte pieces: 64 KB a block at the real
    shapes (D = 2048: two chunks a lane), and falls back to the plain launch 1 where that
    passes STAGED_MAX_BYTES or off CUDA."""
    monkeypatch.setattr(me, "STAGED", True)
    assert me.staged_bytes(2048) == me.STAGED_WARPS * 2 * 2 * me.RPW1 * 32 * 16 == 64 * 1024
    assert me.staged("cuda", 2048) and not me.staged("metal", 2048)
    assert not me.staged("cuda", 16384)
    monkeypatch.setattr(me, "STAGED", False)
    assert not me.staged("cuda", 2048)


def test_staged_launch_2_fits_its_shared_memory(monkeypatch):
    """STAGED_DOWN asks for 8 warps of RPW2 rows of a lane's chunks: 80 KB a block at the
    real shapes (9 experts' 16 chunks a row: 5 a lane), beside SMEM_BYTES of s * h."""
    monkeypatch.setattr(me, "STAGED_DOWN", True)
    assert me.staged_down_bytes(8, 512, True) == 8 * 5 * me.RPW2 * 32 * 16 == 80 * 1024
    assert me.staged_down("cuda", 8, 512, True) and not me.staged_down("metal", 8, 512, True)
    assert not me.staged_down("cuda", 32, 1024, True)
