
import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.paged_attention as pa
from kernels.kernel_set import KernelSet

# (B, Hq, Hkv, D, page_size, pages per row, lengths): grouped 8:1 as in the real model and
# Hq == Hkv, B=1 and B>1, ragged lengths incl. 1 and exactly a page boundary
GRID = [(1, 2, 2, 64, 4, 3, [9]), (3, 16, 2, 256, 8, 4, [1, 32, 17]),
        (4, 4, 4, 128, 16, 3, [48, 5, 33, 16]), (2, 8, 1, 64, 4, 6, [24, 13])]
DTYPES = [mx.float32, mx.bfloat16]


def _make(seed, case, dtype):
    B, Hq, Hkv, D, ps, P, lens = case
    rng = np.random.default_rng(seed)
    num_pages = B * P + 3
    q = rng.standard_normal((B, Hq, D))
    kp = rng.standard_normal((num_pages * ps, Hkv, D))
    vp = rng.standard_normal((num_pages * ps, Hkv, D))
    # pages handed out in a shuffled order, page 0 (scratch) never used
    tables = (rng.permutation(num_pages - 1)[: B * P] + 1).reshape(B, P).astype(np.int32)
    m = (mx.array(q, dtype=dtype), mx.array(kp, dtype=dtype), mx.array(vp, dtype=dtype),
         mx.array(tables), mx.array(np.array(lens, np.int32)), ps, D**-0.5)
    n = (to_np(m[0]), to_np(m[1]), to_np(m[2]), tables, np.array(lens), ps, D**-0.5)
    return m, n


def _tol(dtype):
    return (2e-5, 1e-4) if dtype == mx.float32 else (2e-2, 1e-2)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, dtype, cpu_stream):
    m, n = _make(0, case, dtype)
    assert numpy_ref.close(to_np(pa.reference(*m)), numpy_ref.paged_attention(*n), *_tol(dtype))


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kps", [8, 16, None])
def test_kernel_matches_numpy(backend, case, dtype, kps):
    """kps=8/16 forces many splits (exercises the merge), None the dispatcher's choice."""
    m, n = _make(1, case, dtype)
    out = pa.kernel(*m, backend=backend, kps=kps)
    assert numpy_ref.close(to_np(out), numpy_ref.paged_attention(*n), *_tol(dtype))


def test_dispatcher_matches_numpy(backend):
    m, n = _make(2, GRID[1], mx.bfloat16)
    out = KernelSet(backend).paged_decode_attention(*m)
    assert numpy_ref.close(to_np(out), numpy_ref.paged_attention(*n), *_tol(mx.bfloat16))


def test_joined_output_is_the_same_buffer_with_the_heads_joined(backend):
    """joined=True only declares the output [B, Hq*D] (what the out projection reads):
    the same values, bit for bit, and no Reshape node after the launch."""
    m, _ = _make(2, GRID[1], mx.bfloat16)
    heads = KernelSet(backend).paged_decode_attention(*m)
    joined = KernelSet(backend).paged_decode_attention(*m, joined=True)
    B, Hq, D = heads.shape
    assert joined.shape == (B, Hq * D)
    assert np.array_equal(to_np(joined), to_np(heads).reshape(B, Hq * D))


def _qg(m, seed):
    """The joined q+gate projection [B, Hq*2D] (each head's q, then its gate) whose q
    part is m's q, and the gate as the [B, Hq, D] view the launch read before GATED=2."""
    q = m[0]
    B, Hq, D = q.shape
    gate = mx.array(np.random.default_rng(seed).standard_normal((B, Hq, D)), dtype=q.dtype)
    qg = mx.concatenate([q, gate], axis=-1).reshape(B, Hq * 2 * D)
    return qg, qg.reshape(B, Hq, 2 * D)[..., D:]


def test_the_gate_read_from_the_joined_projection_is_the_gate_view_bit_for_bit(backend):
    """GATED=2 reads head h's gate at columns h*2D + D.. of qg itself: the same values as
    the strided [B, Hq, D] view (GATED=1), to the last bit, and as the reference."""
    m, _ = _make(2, GRID[1], mx.bfloat16)
    qg, view = _qg(m, 3)
    by_view = pa.kernel(*m, backend=backend, gate=view)
    by_qg = pa.kernel(*m, backend=backend, gate=qg)
    assert np.array_equal(to_np(by_qg), to_np(by_view))
    want = pa.reference(*m, gate=view)
    assert np.array_equal(to_np(pa.reference(*m, gate=qg)), to_np(want))
    assert numpy_ref.close(to_np(by_qg), to_np(want), *_tol(mx.bfloat16))


def test_the_gate_is_the_heads_or_the_joined_projection():
    m, _ = _make(2, GRID[1], mx.float32)
    q, kp, vp = m[:3]
    B, Hq, D = q.shape
    assert pa.applies(q, kp, vp, mx.zeros((B, Hq, D)))
    assert pa.applies(q, kp, vp, mx.zeros((B, Hq * 2 * D)))
    assert not pa.applies(q, kp, vp, mx.zeros((B, Hq * D)))
    assert not pa.applies(q, kp, vp, mx.zeros((B, Hq, 2 * D)))


def test_split_size_is_a_power_of_two_in_range():
    for B, Hkv, cap in [(1, 2, 64), (32, 2, 4096), (8, 2, 262144), (1, 1, 8)]:
        kps = pa.keys_per_split(B, Hkv, cap)
        assert 32 <= kps <= 4096 and kps & (kps - 1) == 0


def _fault_caught(out, n):
    bad = np.array(to_np(out))
    bad[0, 0] += 1.0
    return not numpy_ref.close(bad, numpy_ref.paged_attention(*n), *_tol(mx.bfloat16))


def test_planted_fault_is_caught_reference():
    m, n = _make(3, GRID[1], mx.bfloat16)
    assert _fault_caught(pa.reference(*m), n)


def test_planted_fault_is_caught_kernel(backend):
    m, n = _make(3, GRID[1], mx.bfloat16)
    assert _fault_caught(pa.kernel(*m, backend=backend), n)
