"""The MoE block after its router: routing inside the experts' two launches (moe_block)
vs moe_route's kernel then moe_experts' two (three launches, and MLX's copy of the
strided logits view for moe_route where N > 1).

The real shapes (E=256, k=8, D=2048, I=512, 4-bit group 64, bf16, the shared expert and
residual); the logits and the shared gate columns of one joined router row [N, 384], as
the model hands them over; N = 1 .. 32 decode rows. At small N the difference is the
launches (~12-15 us each on the H200); at larger N, each launch-1 warp's own routing.
Run: PYTHONPATH=. python -m kernels.bench.moe_block
"""
from __future__ import annotations

import mlx.core as mx

import kernels.moe_block as mb
import kernels.moe_experts as me
import kernels.moe_route as mr
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report
from kernels.bench.moe_experts import D, E, _block


def main() -> None:
    backend = gpu_backend()
    print(f"moe_block  backend={backend}  device={mx.default_device()}")
    if backend is None:
        print("no GPU backend: nothing to compare")
        return
    experts = _block()._block_experts()
    for N in (1, 2, 4, 8, 16, 32):
        ks = mx.random.split(mx.random.key(N), 3)
        x = mx.random.normal((N, D), key=ks[0]).astype(mx.bfloat16)
        joined = mx.random.normal((N, 384), key=ks[1]).astype(mx.bfloat16)
        res = mx.random.normal((N, D), key=ks[2]).astype(mx.bfloat16)
        mx.eval(x, joined, res)
        logits, gate = joined[:, :E], joined[:, E:E + 1]

        def two_stage():
            idx, w = mr.kernel(logits, 8, True, backend=backend)
            return me.kernel(x, idx, w, experts, gate, res, backend=backend)

        def fused():
            return mb.kernel(x, logits, 8, True, experts, gate, res, backend=backend)
        report(f"N={N} (pairs {8 * N})", compare({"route+experts": two_stage, "fused": fused}),
               "route+experts")


if __name__ == "__main__":
    main()
