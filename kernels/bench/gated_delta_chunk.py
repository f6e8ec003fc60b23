"""Prefill recurrence: kernel (token loop inside) vs the plain-mx token loop.

Real head shapes (Hk=16, Hv=32, D=128), bf16 q/k/v, B=1 at T=512 and 4096.
The plain path dispatches ~15 ops per token, which is what the kernel removes.
Run: PYTHONPATH=. python -m kernels.bench.gated_delta_chunk
"""
from __future__ import annotations

import mlx.core as mx

import kernels.gated_delta_chunk as gdc
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report


def inputs(B: int, T: int, S: int = 8):
    ks = mx.random.split(mx.random.key(T), 5)
    q = (mx.random.normal((B, T, 16, 128), key=ks[0]) * 0.08).astype(mx.bfloat16)
    k = (mx.random.normal((B, T, 16, 128), key=ks[1]) * 0.08).astype(mx.bfloat16)
    v = mx.random.normal((B, T, 32, 128), key=ks[2]).astype(mx.bfloat16)
    g = mx.random.uniform(0.9, 1.0, (B, T, 32), key=ks[3])
    beta = mx.random.uniform(0, 1, (B, T, 32), key=ks[4])
    pool = mx.zeros((S, 32, 128, 128), mx.float32)
    slots = mx.arange(B, dtype=mx.int32)
    mx.eval(q, k, v, g, beta, pool)
    return q, k, v, g, beta, pool, slots


def main() -> None:
    backend = gpu_backend()
    print(f"gated_delta_chunk  backend={backend}  device={mx.default_device()}")
    if backend is None:
        print("no GPU backend: nothing to compare")
        return
    for B, T in ((1, 512), (1, 4096), (4, 512)):
        args = inputs(B, T)

        def plain():
            return list(gdc.reference(*args))

        def fused(lanes):
            return lambda: [gdc.kernel(*args, backend=backend, lanes=lanes)]

        fns = {"plain_mx": plain, "lpr8": fused(8), "lpr16": fused(16), "lpr32": fused(32)}
        slow = T >= 4096
        times = compare(fns, calls=1 if slow else 3, rounds=3, warmup=1)
        report(f"B={B} T={T}", times, "plain_mx")
        print(f"{'':<28} kernel tokens/s (best) = {B * T / min(times.values()):,.0f}")


if __name__ == "__main__":
    main()
