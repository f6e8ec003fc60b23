"""GPU diagnostic for the two MoE-block tests that failed on the H200 in session 8
(tests/kernels/test_moe_experts.py: the block through the experts kernel's reference, and
through the CUDA kernel, against the block's plain path). Prints, for the same block and
input, the largest difference of each GPU path from the plain block run on the CPU (an
independent float32 run) and from each other, beside the output's scale, so the next
lease says which path leaves float32 rounding. Run from the project root:
    PYTHONPATH=. python3 docs/bench/h200-session8-diag_moe.py
"""
import mlx.core as mx
import numpy as np

import kernels.moe_experts as me
from kernels.backend import NAMES
from kernels.kernel_set import KernelSet


def _moe_block(seed=0):
    """The block tests/kernels/test_moe_experts.py builds."""
    import mlx.nn as nn

    from engine.models.moe import SparseMoeBlock
    mx.random.seed(seed)
    block = SparseMoeBlock(dims=128, hidden=64, shared_hidden=64, num_experts=16, top_k=4,
                           norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()
    return block


def run(block, x, residual, kernels, device):
    block.kernel_set = kernels
    with mx.stream(device):
        out = block(x, residual)
        mx.eval(out)
    return np.array(out.astype(mx.float32), dtype=np.float64)


def main():
    block = _moe_block()
    x = mx.random.normal((4, 1, 128), key=mx.random.key(2))
    residual = mx.random.normal((4, 1, 128), key=mx.random.key(3))
    plain = KernelSet.plain("diag")
    only = KernelSet("cuda", tuple((n, "diag") for n in NAMES if n != me.NAME))
    cpu = run(block, x, residual, plain, mx.cpu)
    gpu = run(block, x, residual, plain, mx.default_device())
    on_gpu = mx.default_device().type == mx.DeviceType.gpu
    kern = run(block, x, residual, only, mx.gpu) if on_gpu else gpu   # the kernel: CUDA only
    saved = me.kernel
    me.kernel = lambda *a, backend: me.reference(*a)
    ref = run(block, x, residual, only, mx.default_device())
    me.kernel = saved
    scale = float(np.abs(cpu).max())
    for name, got in (("gpu plain", gpu), ("gpu kernel", kern), ("gpu reference", ref)):
        print(f"{name:14s} vs cpu plain: max |d| {np.abs(got - cpu).max():.3g} (scale {scale:.3g})")
    print(f"gpu kernel vs gpu plain: {np.abs(kern - gpu).max():.3g}; "
          f"gpu reference vs gpu plain: {np.abs(ref - gpu).max():.3g}")


if __name__ == "__main__":
    main()
