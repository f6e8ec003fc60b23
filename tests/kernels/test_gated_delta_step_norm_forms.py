"""kernels/gated_delta_step_norm.py's inputs and output as the models hand them over: the
output declared [B, Hv*Dv] (joined), and z, b and a read as columns of the joined input
projection (columns). Each form against the plain one, bit for bit on the GPU, and the
reference's reading of it; the shared fixtures are test_gated_delta_step_norm.py's."""
import mlx.core as mx
import numpy as np
from kernel_numpy_ref import to_np
from test_gated_delta_step_norm import GRID, _make

import kernels.gated_delta_step_norm as gdsn
from kernels.kernel_set import KernelSet


def test_joined_output_is_the_same_buffer_with_the_heads_joined(backend):
    """joined=True only declares out [B, Hv*Dv] (what the out projection reads): the same
    values, bit for bit, from the same start state (no Reshape node after the launch)."""
    args, kw, _, _ = _make(7, GRID[1], mx.float32)
    heads, pool = KernelSet(backend).gated_delta_step_norm(*args, **kw)
    mx.eval(heads, pool)
    args, kw, _, _ = _make(7, GRID[1], mx.float32)      # the same inputs, a fresh pool
    joined, _ = KernelSet(backend).gated_delta_step_norm(*args, **kw, joined=True)
    B, Hv, Dv = heads.shape
    assert joined.shape == (B, Hv * Dv)
    assert np.array_equal(to_np(joined), to_np(heads).reshape(B, Hv * Dv))


def _joined_projection(args):
    """z, b (beta) and a (g) as columns of one [B, *] array, as Qwen3.5's joined input
    projection holds them after qkv (here 24 columns stand in for qkv), and the columns
    (z's, beta's, g's); the args with the parts cut back out of it (the split path)."""
    q, k, v, a, b, pool, slots, z, w, eps = args
    B, Hv, Dv = v.shape
    joined = mx.concatenate([mx.zeros((B, 24), z.dtype), z.astype(z.dtype),
                             b.astype(z.dtype), a.astype(z.dtype)], axis=1)
    zc, bc, gc = 24, 24 + Hv * Dv, 24 + Hv * Dv + Hv
    parts = (q, k, v, joined[:, gc:gc + Hv], joined[:, bc:bc + Hv], pool, slots,
             joined[:, zc:zc + Hv * Dv], w, eps)
    return joined, (zc, bc, gc), parts


def test_the_joined_projection_read_by_columns_is_the_split_one_bit_for_bit(backend):
    """columns: z, beta and g read where they sit in the joined input projection (no
    Split node): the same values as the split views, to the last bit."""
    args, kw, _, _ = _make(7, GRID[1], mx.bfloat16)
    joined, columns, parts = _joined_projection(args)
    split, pool = KernelSet(backend).gated_delta_step_norm(*parts, **kw, joined=True)
    mx.eval(split, pool)
    args, kw, _, _ = _make(7, GRID[1], mx.bfloat16)          # the same inputs, a fresh pool
    joined, columns, _ = _joined_projection(args)
    q, k, v, _, _, pool, slots, _, w, eps = args
    by_columns, _ = KernelSet(backend).gated_delta_step_norm(
        q, k, v, joined, joined, pool, slots, joined, w, eps, **kw, joined=True,
        columns=columns)
    assert np.array_equal(to_np(by_columns), to_np(split))


def test_the_reference_reads_the_columns_as_the_split_parts(cpu_stream):
    args, kw, _, _ = _make(8, GRID[1], mx.float32)
    joined, columns, parts = _joined_projection(args)
    q, k, v, _, _, pool, slots, _, w, eps = args
    want, rows = gdsn.reference(*parts, **kw)
    got, got_rows = gdsn.reference(q, k, v, joined, joined, pool, slots, joined, w, eps,
                                   **kw, columns=columns)
    assert np.array_equal(to_np(got), to_np(want)) and np.array_equal(to_np(got_rows),
                                                                      to_np(rows))


def test_columns_must_lie_inside_the_joined_projection():
    args, _, _, _ = _make(8, GRID[1], mx.float32)
    joined, (zc, bc, gc), _ = _joined_projection(args)
    q, k, v, _, _, pool, _, _, w, _ = args
    assert gdsn.applies(q, k, v, pool, joined, w, (zc, bc, gc))
    assert not gdsn.applies(q, k, v, pool, joined, w, (zc, bc, gc + 1))   # a past the end
    z_past = joined.shape[1] - v.shape[1] * v.shape[2] + 1
    assert not gdsn.applies(q, k, v, pool, joined, w, (z_past, bc, gc))     # z past the end
    assert not gdsn.applies(q, k, v, pool, joined, w, (zc, bc, -1))         # before the start
    assert not gdsn.applies(q, k, v, pool, joined[None], w, (zc, bc, gc))    # [B, *] only
