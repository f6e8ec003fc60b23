"""Paged decode attention: kernel vs gather-then-SDPA (the engine's plain path).

Real shapes: Hq=16, Hkv=2, D=256, bf16 pools, page size 16, pages shuffled,
context 1024 and 4096 for every row, B = 1, 8, 16, 32.
Run: PYTHONPATH=. python -m kernels.bench.paged_attention
"""
from __future__ import annotations

import mlx.core as mx

import kernels.paged_attention as pa
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report

PS = 16


def inputs(B: int, ctx: int):
    P = ctx // PS
    num_pages = B * P + 1
    ks = mx.random.split(mx.random.key(B * ctx), 4)
    q = mx.random.normal((B, 16, 256), key=ks[0]).astype(mx.bfloat16)
    kp = mx.random.normal((num_pages * PS, 2, 256), key=ks[1]).astype(mx.bfloat16)
    vp = mx.random.normal((num_pages * PS, 2, 256), key=ks[2]).astype(mx.bfloat16)
    tables = (mx.random.permutation(num_pages - 1, key=ks[3])[: B * P] + 1).reshape(B, P)
    lens = mx.full((B,), ctx, mx.int32)
    mx.eval(q, kp, vp, tables, lens)
    return q, kp, vp, tables.astype(mx.int32), lens


def gather_sdpa(q, kp, vp, tables, lens, scale):
    """What engine/models/attention.py does for T=1: gather pages, masked SDPA."""
    B, P = tables.shape
    idx = (tables[:, :, None] * PS + mx.arange(PS, dtype=mx.int32)).reshape(B, -1)
    keys = kp[idx].transpose(0, 2, 1, 3)
    vals = vp[idx].transpose(0, 2, 1, 3)
    mask = (mx.arange(P * PS)[None, :] < lens[:, None])[:, None, None, :]
    return mx.fast.scaled_dot_product_attention(q[:, :, None], keys, vals, scale=scale,
                                                mask=mask)


def main() -> None:
    backend = gpu_backend()
    print(f"paged_attention  backend={backend}  device={mx.default_device()}")
    if backend is None:
        print("no GPU backend: nothing to compare")
        return
    scale = 256**-0.5
    for ctx in (1024, 4096):
        for B in (1, 8, 16, 32):
            q, kp, vp, tables, lens = inputs(B, ctx)
            fns = {"gather_sdpa": lambda: gather_sdpa(q, kp, vp, tables, lens, scale),
                   "kernel": lambda: pa.kernel(q, kp, vp, tables, lens, PS, scale,
                                               backend=backend)}
            times = compare(fns)
            report(f"ctx={ctx} B={B}", times, "gather_sdpa")
            gbps = 2 * B * ctx * 2 * 256 * 2 / times["kernel"] / 1e9
            print(f"{'':<28} kernel K+V read rate = {gbps:,.0f} GB/s")


if __name__ == "__main__":
    main()
