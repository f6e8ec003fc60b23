"""A prompt chunk's Gated DeltaNet conv (kernels/gdn_conv_chunk.py) against an independent
float64 numpy reference, its CUDA body on the CPU, and the model's use of it against its
plain path."""
import shutil

import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np
from test_gdn_conv_step import EPS, _close, _model

import kernels.gdn_conv_chunk as gcc
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT

# (B, T, S, (Hk, Hv, Dk, Dv), taps, lengths): the real head width at fewer heads; Dk != Dv;
# a chunk past one tile, rows shorter than the conv's window, an empty row
GRID = [(1, 5, 3, (2, 4, 128, 128), 4, None), (3, 21, 8, (1, 2, 32, 64), 4, [21, 2, 9]),
        (2, 4, 4, (2, 2, 64, 32), 3, [0, 4])]
DTYPES = [mx.float32, mx.bfloat16]


def _make(seed, B, T, S, heads, K, lengths, dtype):
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    rng = np.random.default_rng(seed)
    wide = mx.array(rng.standard_normal((B, T, C + 40)), dtype)
    qkv = wide[..., 24:24 + C]                       # a strided view, as the split makes it
    weight = mx.array(rng.standard_normal((C, K, 1)) * 0.5, mx.float32)
    pool = mx.array(rng.standard_normal((S, K - 1, C)), dtype)
    slots = mx.array(rng.permutation(S)[:B], mx.int32)
    fresh = mx.array([b % 3 == 1 for b in range(B)])
    lens = None if lengths is None else mx.array(lengths, mx.int32)
    return qkv, weight, pool, slots, fresh, lens, heads


def numpy_conv(qkv, weight, pool, slots, fresh, lens, heads):
    """float64, row by row: Z = [old (0 when fresh), x]; per live token the depthwise
    conv over its window, SiLU, split, per-head norms; 0 past the length; the new state
    is Z's K-1 entries from the length on."""
    Hk, Hv, Dk, Dv = heads
    x = to_np(qkv).astype(np.float64)
    B, T, _ = x.shape
    w = to_np(weight)[:, :, 0].T.astype(np.float64)                        # [K, C]
    K = w.shape[0]
    lengths = [T] * B if lens is None else to_np(lens).tolist()
    kd = Hk * Dk
    q, k = np.zeros((B, T, Hk, Dk)), np.zeros((B, T, Hk, Dk))
    v, rows = np.zeros((B, T, Hv, Dv)), []
    for b in range(B):
        old = to_np(pool)[to_np(slots)[b]].astype(np.float64)
        z = np.concatenate([old * (0.0 if to_np(fresh)[b] else 1.0), x[b]], axis=0)
        for t in range(lengths[b]):
            y = (z[t:t + K] * w).sum(axis=0)
            y = y / (1 + np.exp(-y))
            qh, kh = y[:kd].reshape(Hk, Dk), y[kd:2 * kd].reshape(Hk, Dk)
            q[b, t] = qh / np.sqrt((qh * qh).sum(-1, keepdims=True) + EPS) * Dk ** -0.5
            k[b, t] = kh / np.sqrt((kh * kh).sum(-1, keepdims=True) + EPS)
            v[b, t] = y[2 * kd:].reshape(Hv, Dv)
        rows.append(z[lengths[b]:lengths[b] + K - 1])
    return (q, k, v), np.stack(rows)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, dtype, cpu_stream):
    args = _make(0, *case, dtype)
    assert _close(*gcc.reference(*args, EPS), numpy_conv(*args), dtype)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, case, dtype):
    args = _make(1, *case, dtype)
    want = numpy_conv(*args)                       # before the kernel writes the pool
    outs = gcc.kernel(*args, EPS, backend=backend)
    mx.eval(outs)
    assert _close(outs, args[2][args[3]], want, dtype)


def test_planted_fault_is_caught():
    args = _make(2, 2, 6, 5, (1, 2, 32, 32), 4, [6, 2], mx.float32)
    with mx.stream(mx.cpu):
        (q, k, v), rows = gcc.reference(*args, EPS)
        want = numpy_conv(*args)
        assert _close((q, k, v), rows, want, mx.float32)
        assert not _close((q, k, v + 1e-3), rows, want, mx.float32)
        assert not _close((q, k, v), rows[:, ::-1], want, mx.float32)   # states shifted wrong
        at_t = gcc.reference(*args[:5], None, args[6], EPS)[1]          # tails at T, not L
        assert not _close((q, k, v), at_t, want, mx.float32)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_body_runs_on_the_cpu():
    """kernels/bench/cuda_on_cpu_chunk.py: a strided qkv, three tiles, ragged and fresh
    rows, against float64 numpy (g++ shim: a block's threads as threads)."""
    from kernels.bench.cuda_on_cpu_chunk import CONV_CASES, emulate_conv_chunk
    B, T, S, heads, K, lengths, fresh = CONV_CASES[0]
    assert emulate_conv_chunk(B, T, S, heads, K, lengths, fresh, seed=12) < 1e-5


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(gcc, "kernel", refuse)
    qkv, weight, pool, slots, fresh, lens, heads = _make(3, 2, 5, 4, (1, 2, 32, 32), 4, None,
                                                         mx.float32)
    ks = KernelSet("cuda")
    assert NO_KERNELS.gdn_conv_chunk(qkv, weight, pool, slots, fresh, lens, heads, EPS) is None
    assert KernelSet("metal", (("gdn_conv_chunk", "off"),)).gdn_conv_chunk(
        qkv, weight, pool, slots, fresh, lens, heads, EPS) is None
    assert ks.gdn_conv_chunk(qkv, weight, pool, slots, fresh, lens, (1, 2, 16, 64), EPS) is None
    long_conv = mx.zeros((qkv.shape[-1], gcc.TT + 2, 1))                # a window past a tile
    assert not gcc.applies(qkv, long_conv, mx.zeros((4, gcc.TT + 1, qkv.shape[-1])), heads)


class _ChunkConvByReference(KernelSet):
    """The kernel's contract on any machine: its reference, the pool rows scattered."""
    def gdn_conv_chunk(self, qkv, weight, pool, slots, fresh, lengths, heads, eps):
        if not gcc.applies(qkv, weight, pool, heads):
            return None
        outs, rows = gcc.reference(qkv, weight, pool, slots, fresh, lengths, heads, eps)
        pool = mx.array(pool)
        pool[slots] = rows
        return outs, pool


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_next"])
def test_the_layer_hands_the_kernel_its_conv_as_its_plain_path_runs_it(model_type):
    """Wiring: prompts of different lengths in one chunk (ragged rows), a later chunk, a
    new sequence's prompt beside a continuing one (a fresh row), then decode steps: through
    the kernel's contract, the plain path's logits and conv states."""
    from qwen_fixtures import Rows

    from engine.models.base import use_kernels
    model = _model(model_type)
    runs = {}
    others = tuple((n, "test") for n in NAMES if n != gcc.NAME)
    for name, kernels in (("plain", NO_KERNELS), ("kernel", _ChunkConvByReference("cuda", others))):
        use_kernels(model, kernels)
        rows = Rows(model)
        for s in (0, 1):
            rows.start(s)
        out = [rows.forward({0: [5, 6, 7, 8, 9, 10], 1: [9, 10]})]
        out.append(rows.forward({0: [12, 13, 14], 1: [15, 16, 17]}))
        rows.start(2)
        out.append(rows.forward({1: [18, 19], 2: [30, 31, 32, 33, 34]}))
        for step in range(2):
            out.append(rows.forward({0: [40 + step], 1: [50 + step], 2: [60 + step]}))
        runs[name] = ([np.array(o) for o in out],
                      [np.array(layer[0]) for layer in rows.cache.states])
    for got, want in zip(runs["kernel"][0], runs["plain"][0]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The states hold the layers' inputs, which carry the two paths' float32 rounding; a
    # wrong slot, shift or length is off by O(1).
    for got, want in zip(runs["kernel"][1], runs["plain"][1]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_chunk_counts_one_launch_per_layer_for_its_conv():
    from kernels.stand_in import gpu_graph
    qkv, weight, pool, slots, fresh, lens, heads = _make(5, 2, 9, 4, (1, 2, 32, 32), 4,
                                                         [9, 3], mx.float32)
    with gpu_graph() as ledger:
        KernelSet(COUNT).gdn_conv_chunk(qkv, weight, pool, slots, None, lens, heads, EPS)
    assert ledger.calls == {"gdn_conv_chunk": 1}
