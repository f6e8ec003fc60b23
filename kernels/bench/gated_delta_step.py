"""Decode step: CUDA/Metal kernel vs the plain-mx path, at the real shapes.

Hk=16, Hv=32, Dk=Dv=128, bf16 q/k/v, a 64-slot float32 pool, B rows on
shuffled slots. Both paths include the write-back into the pool (plain: gather,
ops, `pool[slots] = rows`, which copies the whole pool; kernel: in place).
Then the step with its gated output norm: gated_delta_step + gated_rms_norm (two launches)
against kernels/gated_delta_step_norm (one) at several layouts.
Run: PYTHONPATH=. python -m kernels.bench.gated_delta_step
"""
from __future__ import annotations

import mlx.core as mx

import kernels.gated_delta_step as gds
import kernels.gated_delta_step_norm as gdsn
import kernels.gated_rms_norm as grn
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report


def inputs(B: int, S: int = 64):
    ks = mx.random.split(mx.random.key(B), 6)
    q = (mx.random.normal((B, 16, 128), key=ks[0]) * 0.08).astype(mx.bfloat16)
    k = (mx.random.normal((B, 16, 128), key=ks[1]) * 0.08).astype(mx.bfloat16)
    v = mx.random.normal((B, 32, 128), key=ks[2]).astype(mx.bfloat16)
    g = mx.random.uniform(0.9, 1.0, (B, 32), key=ks[3])
    beta = mx.random.uniform(0, 1, (B, 32), key=ks[4])
    pool = mx.zeros((S, 32, 128, 128), mx.float32)
    slots = mx.random.permutation(S, key=ks[5])[:B].astype(mx.int32)
    mx.eval(q, k, v, g, beta, pool, slots)
    return q, k, v, g, beta, pool, slots


def main() -> None:
    backend = gpu_backend()
    print(f"gated_delta_step  backend={backend}  device={mx.default_device()}")
    if backend is None:
        print("no GPU backend: nothing to compare")
        return
    for B in (1, 8, 16, 32):
        q, k, v, g, beta, pool, slots = inputs(B)

        def plain():
            y, rows = gds.reference(q, k, v, g, beta, pool, slots)
            pool[slots] = rows
            return [y, pool]

        def fused(lanes):
            # in place: the kernel writes the new states back into the pool
            return lambda: [gds.kernel(q, k, v, g, beta, pool, slots, backend=backend,
                                       lanes=lanes)]

        fns = {"plain_mx": plain, "lpr4": fused(4), "lpr8": fused(8), "lpr32": fused(32)}
        report(f"B={B}", compare(fns), "plain_mx")
    print("step + gated output norm: two launches (step at 32 lanes, gated_rms_norm) vs one "
          "(kernels/gated_delta_step_norm at (lanes, rows a thread); picked: "
          f"{gdsn.pick_layout(128, 128)})")
    for B in (1, 8, 16, 32):
        q, k, v, g, beta, pool, slots = inputs(B)
        wide = mx.random.normal((B, 32 * 128 + 32), key=mx.random.key(100 + B)).astype(mx.bfloat16)
        z, w = wide[:, 16:16 + 32 * 128], mx.ones((128,), mx.bfloat16)  # z a strided view
        mx.eval(z, w)

        def two():
            y = gds.kernel(q, k, v, g, beta, pool, slots, backend=backend, lanes=32)
            return [grn.kernel(y[:, None], z.reshape(B, 1, 32, 128), w, 1e-6, backend=backend)]

        def one(layout):
            return lambda: [gdsn.kernel(q, k, v, g, beta, pool, slots, z, w, 1e-6,
                                        backend=backend, layout=layout)]

        # Every layout that fits the real head: fewer threads a block (more rows a thread)
        # let more blocks share an SM (1024 threads at ~40 registers fit once per SM).
        fns = {"two": two, **{f"l{la}r{ro}": one((la, ro))
                              for ro in (2, 4, 8, 16) for la in (16, 32)
                              if gdsn.fits(128, 128, la, ro)}}
        report(f"B={B}", compare(fns), "two")


if __name__ == "__main__":
    main()
