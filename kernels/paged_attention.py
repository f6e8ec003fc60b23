"""Decode attention (one new token per row) that reads K/V through block tables.

q [B, Hq, D]; k_pool, v_pool [num_pages * page_size, Hkv, D]; block_tables
[B, P] int32 (page ids, any order); context_lens [B] int32 (keys 0..len-1
are live; len >= 1); grouped heads: query head h reads KV head h // (Hq // Hkv).
Output [B, Hq, D] in q.dtype; with gate [B, Hq, D] (any strides: a view of the gated
attention's q projection), times sigmoid(gate), inside pass 2.

Flash-decoding in two launches: pass 1 gives each warp one split of KPS keys
of one (row, KV head) and all G = Hq/Hkv query heads of that group (K/V are
read once per group), keeping an online softmax (m, l, unnormalised acc);
pass 2 merges the splits. Scores live in the log2 domain (scale * log2 e is
folded into q) so the exponentials are exp2.
"""
from __future__ import annotations

import math

import mlx.core as mx

from kernels.kernel_build import cuda_kernel
from kernels.paged_attention_src import (
    _CUDA_HEADER,
    _CUDA_PASS1,
    _CUDA_PASS2,
    _METAL_PASS1,
    _METAL_PASS2,
)
from kernels.stand_in import COUNT, StandInKernel

NAME = "paged_attention"
_NW = 4          # warps per block; they share the group's q in shared memory
_TARGET_WARPS = 4096

_built: dict[str, tuple] = {}


def _get(backend: str):
    if backend == COUNT:        # two passes, two launches
        return StandInKernel(NAME + "_p1"), StandInKernel(NAME + "_p2")
    if backend not in _built:
        if backend == "cuda":
            p1 = cuda_kernel(
                name="tandem_paged_attn_p1", header=_CUDA_HEADER, source=_CUDA_PASS1,
                input_names=["q", "k_pool", "v_pool", "block_tables", "context_lens", "scale"],
                output_names=["part_acc", "part_ml"])
            p2 = cuda_kernel(
                name="tandem_paged_attn_p2", header=_CUDA_HEADER, source=_CUDA_PASS2,
                input_names=["part_acc", "part_ml", "gate"], output_names=["out"],
                ensure_row_contiguous=False)
        else:
            p1 = mx.fast.metal_kernel(
                name="tandem_paged_attn_p1", source=_METAL_PASS1,
                input_names=["q", "k_pool", "v_pool", "block_tables", "context_lens", "scale"],
                output_names=["part_acc", "part_ml"])
            p2 = mx.fast.metal_kernel(
                name="tandem_paged_attn_p2", source=_METAL_PASS2,
                input_names=["part_acc", "part_ml", "gate"], output_names=["out"],
                ensure_row_contiguous=False)
        _built[backend] = (p1, p2)
    return _built[backend]


def reference(q, k_pool, v_pool, block_tables, context_lens, page_size: int, scale: float,
              gate=None):
    """Plain-mx float32: gather every row's pages, mask keys >= len, softmax; times
    sigmoid(gate) when given ([B, Hq, D], or the joined q+gate projection [B, Hq*2D]:
    `gate_heads`)."""
    B, Hq, D = q.shape
    gate = None if gate is None else gate_heads(gate, q.shape)
    Hkv = k_pool.shape[1]
    G = Hq // Hkv
    idx = block_tables[:, :, None] * page_size + mx.arange(page_size, dtype=mx.int32)
    idx = idx.reshape(B, -1)                                            # [B, L]
    keys = k_pool[idx].astype(mx.float32).transpose(0, 2, 1, 3)         # [B, Hkv, L, D]
    vals = v_pool[idx].astype(mx.float32).transpose(0, 2, 1, 3)         # [B, Hkv, L, D]
    qg = q.astype(mx.float32).reshape(B, Hkv, G, D)                     # [B, Hkv, G, D]
    scores = (qg @ keys.transpose(0, 1, 3, 2)) * scale                  # [B, Hkv, G, L]
    live = mx.arange(idx.shape[1])[None, :] < context_lens[:, None]     # [B, L]
    scores = mx.where(live[:, None, None, :], scores, -mx.inf)
    probs = mx.softmax(scores, axis=-1)
    out = (probs @ vals).reshape(B, Hq, D)
    if gate is not None:
        out = out * mx.sigmoid(gate.astype(mx.float32))
    return out.astype(q.dtype)


def gate_heads(gate, q_shape):
    """The gate as [B, Hq, D]: itself, or from the joined q+gate projection [B, >= Hq*2D]
    (each head's q then its gate; k and v may follow) the columns pass 2 reads with
    GATED=2."""
    B, Hq, D = q_shape
    if gate.ndim == 2:
        return gate[:, :Hq * 2 * D].reshape(B, Hq, 2 * D)[..., D:]
    return gate


def applies(q, k_pool, v_pool, gate=None) -> bool:
    return applies_to(q.shape, k_pool, v_pool, None if gate is None else gate.shape)


def applies_to(q_shape, k_pool, v_pool, gate_shape=None) -> bool:
    """applies() from the shape q [B, Hq, D] will have (before it is computed); a gate
    [B, Hq, D] or the joined q+gate projection [B, >= Hq*2D] (k, v may follow)."""
    B, Hq, D = q_shape
    Hkv = k_pool.shape[1]
    gate_ok = gate_shape is None or tuple(gate_shape) == tuple(q_shape) or (
        len(gate_shape) == 2 and gate_shape[0] == B and gate_shape[1] >= Hq * 2 * D)
    return (gate_ok and Hq % Hkv == 0
            and D % 32 == 0 and D <= 1024 and k_pool.shape == v_pool.shape
            and k_pool.dtype == v_pool.dtype and (Hq // Hkv) * D * 4 <= 32768
            and k_pool.shape[2] == D)


def keys_per_split(batch: int, num_kv_heads: int, capacity: int) -> int:
    """Split size (power of two, 32..4096) that gives about _TARGET_WARPS warps."""
    want = math.ceil(capacity * batch * num_kv_heads / _TARGET_WARPS)
    return min(4096, max(32, 1 << max(0, want - 1).bit_length()))


_no_gate: list[mx.array] = []


def _gate_input(gate):
    """The gate, or a placeholder pass 2 does not read (GATED=0)."""
    if gate is not None:
        return gate
    if not _no_gate:
        _no_gate.append(mx.zeros((1, 1, 1), mx.float32))
        mx.eval(_no_gate[0])
    return _no_gate[0]


def kernel(q, k_pool, v_pool, block_tables, context_lens, page_size: int, scale: float, *,
           backend: str, kps: int | None = None, gate=None, joined: bool = False):
    """Launch both passes on `backend`. Returns [B, Hq, D] in q.dtype (times sigmoid(gate)
    when a gate [B, Hq, D] is given, or the joined q+gate projection [B, Hq*2D] whose head
    h's gate is columns h*2D + D.. (GATED=2: no reshape and slice before the launch));
    joined: the same buffer declared [B, Hq*D], the heads joined as the out projection
    reads them (no Reshape node after the launch)."""
    B, Hq, D = q.shape
    Hkv = k_pool.shape[1]
    G = Hq // Hkv
    P = block_tables.shape[1]
    kps = kps or keys_per_split(B, Hkv, P * page_size)
    S = math.ceil(P * page_size / kps)
    p1, p2 = _get(backend)
    part_acc, part_ml = p1(
        inputs=[q, k_pool, v_pool, block_tables.astype(mx.int32),
                context_lens.astype(mx.int32), mx.array([scale], dtype=mx.float32)],
        template=[("KT", k_pool.dtype), ("D", D), ("Hkv", Hkv), ("G", G), ("PS", page_size),
                  ("KPS", kps), ("NW", _NW)],
        grid=(B * Hkv * math.ceil(S / _NW) * _NW * 32, 1, 1), threadgroup=(_NW * 32, 1, 1),
        output_shapes=[(B, Hq, S, D), (B, Hq, S, 2)],
        output_dtypes=[mx.float32, mx.float32])
    (out,) = p2(
        inputs=[part_acc, part_ml, _gate_input(gate)],
        template=[("OutT", q.dtype), ("D", D),
                  ("GATED", 0 if gate is None else 1 if gate.ndim == 3 else 2)],
        grid=(B * Hq * D, 1, 1), threadgroup=(D, 1, 1),
        output_shapes=[(B, Hq * D) if joined else (B, Hq, D)], output_dtypes=[q.dtype])
    return out
