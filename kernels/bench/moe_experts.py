"""Routed + shared experts at decode: the two-launch kernel vs the model's plain path.

The real shapes (E=256, k=8, D=2048, I=512, 4-bit group 64, bf16; a shared expert of
width 512), each token routed to a random 8 of 256 (never the same few), N = 1, 2, 4, 8,
16, 32 tokens and the prompt-chunk sizes 48-128 (kernels/moe_experts.py's MAX_PAIRS
decides where it stops: tune it here).
Plain path: the gathered quantized matmuls of engine/models/moe.py (sorted once the pairs
reach SORT_MIN_PAIRS), SwiGLU, the weighted-sum matmul, the shared expert and the add.
Run: PYTHONPATH=. python -m kernels.bench.moe_experts
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

import kernels.moe_experts as me
from kernels.backend import NAMES, gpu_backend
from kernels.bench.common import compare, report
from kernels.kernel_set import NO_KERNELS, KernelSet

D, I, E = 2048, 512, 256  # noqa: E741 (the real widths and experts)


def _block():
    from engine.models.moe import SparseMoeBlock
    block = SparseMoeBlock(dims=D, hidden=I, shared_hidden=I, num_experts=E, top_k=8,
                           norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()
    block.set_dtype(mx.bfloat16)
    mx.eval(block.parameters())
    return block


def main() -> None:
    backend = gpu_backend()
    print(f"moe_experts  backend={backend}  device={mx.default_device()}")
    if backend is None:
        print("no GPU backend: nothing to compare")
        return
    block = _block()
    only = KernelSet(backend, tuple((n, "bench") for n in NAMES if n != me.NAME))
    rng = np.random.default_rng(0)
    saved = me.MAX_PAIRS
    me.MAX_PAIRS = 10 ** 6               # let the kernel run past its cut to compare
    for N in (1, 2, 4, 8, 16, 32, 48, 64, 96, 128):
        xf = mx.random.normal((N, D), key=mx.random.key(N)).astype(mx.bfloat16)
        idx = mx.array(np.stack([rng.choice(E, 8, replace=False) for _ in range(N)]),
                       mx.int32)
        scores = mx.softmax(mx.random.normal((N, 8)), axis=-1)
        res = mx.random.normal((N, D)).astype(mx.bfloat16)
        gate = mx.random.normal((N, 1)).astype(mx.bfloat16)
        mx.eval(xf, idx, scores, res, gate)

        def plain():
            block.kernel_set = NO_KERNELS
            return (block.experts(xf, idx, scores) + block.shared_expert(xf) * mx.sigmoid(gate)
                    + res)

        def kernel():
            block.kernel_set = only
            return block._kernel_block(xf, idx, scores, gate, res)
        report(f"N={N} (pairs {8 * N})", compare({"plain_mx": plain, "kernel": kernel}),
               "plain_mx")
    me.MAX_PAIRS = saved


if __name__ == "__main__":
    main()
