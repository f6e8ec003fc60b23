"""GPU diagnostic for the two MoE-block tests that fail on the H200 (sessions 8 and 9):
session 9's h200-session8-diag_moe.py showed the block's *plain* path wrong on CUDA
(max |d| 1.86 at scale 2.73 against the CPU's float32 run) while the experts kernel and
its reference agree with the CPU. Reading MLX's CUDA dispatch (mlx/backend/cuda/quantized/
qmm/qmm.cu, supports_qmm_sm90; quantized.cpp) points at one op: a float32
quantized_matmul with K <= group_size and more than one row goes to the Hopper CUTLASS
kernel qmm_sm90, whose float32 path MLX does not test; the test block's shared-expert
down projection has K = 64 = its group size. This prints, GPU against CPU:
  1. quantized_matmul over shapes that take qmm_sm90 (the first three) and controls;
  2. the test block's parts one by one (router, shared expert, routed experts).
If only (1)'s first rows and the shared expert are off, the failure is MLX's, and it
touches no shape of the real models (K = 512, 576, 1536, 2048 are all > the group size).
Run from the project root:  PYTHONPATH=. python3 docs/bench/h200-session9-diag_qmm.py
"""
import mlx.core as mx
import numpy as np


def _max_diff(f):
    g, c = f(mx.default_device()), f(mx.cpu)   # on a machine without a GPU: 0s
    mx.eval(g, c)
    g, c = np.array(g.astype(mx.float32)), np.array(c.astype(mx.float32))
    return float(np.abs(g - c).max()), float(np.abs(c).max())


def quantized_matmuls():
    grid = [(4, 1, 64, 128, 64), (1, 4, 64, 128, 64), (4, 1, 128, 128, 128),   # qmm_sm90
            (1, 1, 64, 128, 64), (4, 1, 64, 128, 32), (4, 1, 128, 128, 64),    # controls
            (16, 1, 2048, 512, 64), (16, 1, 512, 2048, 64), (16, 1, 576, 1536, 64),
            (16, 1, 1536, 576, 64)]
    for dtype in (mx.float32, mx.bfloat16):
        for m, b, k, n, gs in grid:
            x = mx.random.normal((b, m, k), key=mx.random.key(0)).astype(dtype)
            w = (mx.random.normal((n, k), key=mx.random.key(1)) / k ** 0.5).astype(dtype)
            q = mx.quantize(w, group_size=gs, bits=4)
            d, scale = _max_diff(lambda s: mx.quantized_matmul(
                x, *q, transpose=True, group_size=gs, bits=4, stream=s))
            print(f"quantized_matmul {str(dtype):14s} M={m} B={b} K={k} N={n} group={gs}: "
                  f"max |d| {d:.2e} (scale {scale:.2f})")


def block_parts():
    import mlx.nn as nn

    from engine.models.moe import SparseMoeBlock
    mx.random.seed(0)
    block = SparseMoeBlock(dims=128, hidden=64, shared_hidden=64, num_experts=16, top_k=4,
                           norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()
    x = mx.random.normal((4, 128), key=mx.random.key(2))

    def on(stream, f):
        with mx.stream(stream):
            return f()
    parts = {
        "router (gates + route)": lambda: block.route(block.gates(x)[0])[1],
        "shared expert": lambda: block.shared_expert(x),
        "routed experts": lambda: block.experts(x, *block.route(block.gates(x)[0])),
        "whole block": lambda: block(x),
    }
    for name, f in parts.items():
        d, scale = _max_diff(lambda s: on(s, f))
        print(f"{name:24s} GPU vs CPU: max |d| {d:.2e} (scale {scale:.2f})")


if __name__ == "__main__":
    quantized_matmuls()
    block_parts()
