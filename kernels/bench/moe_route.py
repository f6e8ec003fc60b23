"""MoE routing: one kernel vs the plain-mx softmax / argpartition / gather / renormalise.

E=256, k=8, bf16 router logits; N = 1, 8, 16, 32 (decode) and 4096 (a prefill chunk).
Run: PYTHONPATH=. python -m kernels.bench.moe_route
"""
from __future__ import annotations

import mlx.core as mx

import kernels.moe_route as mr
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report


def plain_route(logits, k):
    """mlx-lm's Qwen MoE gate: softmax, argpartition, take, renormalise."""
    probs = mx.softmax(logits.astype(mx.float32), axis=-1)
    inds = mx.argpartition(-probs, kth=k - 1, axis=-1)[..., :k]
    w = mx.take_along_axis(probs, inds, axis=-1)
    return inds, w / w.sum(axis=-1, keepdims=True)


def main() -> None:
    backend = gpu_backend()
    print(f"moe_route  backend={backend}  device={mx.default_device()}")
    if backend is None:
        print("no GPU backend: nothing to compare")
        return
    for N in (1, 8, 16, 32, 4096):
        logits = mx.random.normal((N, 256), key=mx.random.key(N)).astype(mx.bfloat16)
        mx.eval(logits)
        fns = {"plain_mx": lambda: list(plain_route(logits, 8)),
               "kernel": lambda: list(mr.kernel(logits, 8, backend=backend))}
        report(f"N={N}", compare(fns), "plain_mx")


if __name__ == "__main__":
    main()
