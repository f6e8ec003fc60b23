"""A prompt chunk's routed experts: grouped by expert (kernels/moe_grouped.py) against the
model's plain path (the sorted gathered matmuls) and kernels/moe_experts.py (a warp a pair).

The real shapes (E=256, k=8, D=2048, I=512, 4-bit group 64, bf16), each token routed to a
random 8 of 256, chunks of N = 32-512 tokens (256-4,096 pairs); routed experts only (the
shared expert and the residual are the same dense path in all three). Each expert's
weights are ~1.5 MB: reading all 256 once is ~0.4 GB, ~0.13 ms at 3 TB/s, the floor a
launch pair reading each once can approach. The engine makes the same comparison itself
at load, on the model's own layer (kernels/moe_grouped_tune.py); this table shows it whole.
Run: PYTHONPATH=. python -m kernels.bench.moe_grouped
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

import kernels.moe_experts as me
import kernels.moe_grouped as mg
from kernels.backend import NAMES, gpu_backend
from kernels.bench.common import compare, report
from kernels.bench.moe_experts import D, E, _block
from kernels.kernel_set import NO_KERNELS, KernelSet


def main() -> None:
    backend = gpu_backend()
    print(f"moe_grouped  backend={backend}  device={mx.default_device()}")
    if backend != "cuda":
        print("no CUDA backend: nothing to compare")
        return
    block = _block()
    experts = block.switch_mlp.quantized_experts()
    pair_kernel = KernelSet(backend, tuple((n, "bench") for n in NAMES if n != me.NAME))
    rng = np.random.default_rng(0)
    saved = me.MAX_PAIRS
    me.MAX_PAIRS = 10 ** 6               # let the pair kernel run past its cut to compare
    for N in (32, 64, 128, 256, 512):
        x = mx.random.normal((N, D), key=mx.random.key(N)).astype(mx.bfloat16)
        idx = mx.array(np.stack([rng.choice(E, 8, replace=False) for _ in range(N)]),
                       mx.int32)
        scores = mx.softmax(mx.random.normal((N, 8)), axis=-1)
        mx.eval(x, idx, scores)

        def plain():
            block.kernel_set = NO_KERNELS
            return block.experts(x, idx, scores)

        def per_pair():
            block.kernel_set = pair_kernel
            return block.experts(x, idx, scores)

        def grouped():
            return mg.kernel(x, idx, scores, experts, backend=backend)
        want, got = plain().astype(mx.float32), grouped().astype(mx.float32)
        err = (mx.abs(got - want).max() / mx.abs(want).max()).item()   # bf16 both: ~2**-8
        report(f"N={N} (pairs {8 * N}, err {err:.1e})",
               compare({"plain_mx": plain, "moe_experts": per_pair, "moe_grouped": grouped}),
               "plain_mx")
    me.MAX_PAIRS = saved


if __name__ == "__main__":
    main()
