"""The decode step's quantized projections: kernels/qmm_rows.py against mx.quantized_matmul.

The Qwen3.5-35B-A3B shapes (group 64, bf16; the joined Gated DeltaNet input projection
padded to a multiple of 128 rows as on a GPU, its output projection, the attention's
joined q/gate/k/v and o projections, the head; the 8-bit router joined with the shared
expert's gate, 257 rows padded to 384) at M = 1, 2, 4, 8, 16, 32 rows, and one step's
worth (30 + 30 + 10 + 10 + 1 4-bit calls, as kernel_time counts 81, and 40 8-bit ones). M = 1 is MLX's
`qmv` on both sides unless --one-row (the kernel's contract starts at 2 rows; this
says whether it should start at 1).
Run: PYTHONPATH=. python -m kernels.bench.qmm_rows [--one-row]
"""
from __future__ import annotations

import sys

import mlx.core as mx

import kernels.qmm_rows as qr
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report

# name: (N, K, calls a step, bits)
SHAPES = {"gdn in_proj": (12416, 2048, 30, 4), "gdn out_proj": (2048, 4096, 30, 4),
          "attn qkv": (9216, 2048, 10, 4), "attn o_proj": (2048, 4096, 10, 4),
          "head": (248320, 2048, 1, 4), "router+gate": (384, 2048, 40, 8)}


def main(argv: list[str]) -> None:
    backend = gpu_backend()
    print(f"qmm_rows  backend={backend}  device={mx.default_device()}")
    if backend != "cuda":
        print("no CUDA backend: nothing to compare")
        return
    one_row = "--one-row" in argv
    if one_row:
        qr.MIN_ROWS = 1
    weights = {}
    for name, (N, K, _, bits) in SHAPES.items():
        w = (mx.random.normal((N, K), key=mx.random.key(N + K)) * K ** -0.5).astype(mx.bfloat16)
        weights[name] = mx.quantize(w, group_size=64, bits=bits)
        mx.eval(weights[name])
    for M in (1, 2, 4, 8, 16, 32):
        step = {"mlx": 0.0, "qmm_rows": 0.0}
        for name, (N, K, per_step, bits) in SHAPES.items():
            w, s, b = weights[name]
            x = mx.random.normal((M, K), key=mx.random.key(M)).astype(mx.bfloat16)
            mx.eval(x)
            fns = {"mlx": lambda: mx.quantized_matmul(x, w, s, b, transpose=True,
                                                      group_size=64, bits=bits)}
            if qr.applies(x, w, s, b, 64, bits):
                fns["qmm_rows"] = lambda: qr.kernel(x, w, s, b, 64, bits, backend=backend)
            times = compare(fns, calls=20, rounds=5)
            report(f"M={M:<2} {name} {N}x{K}", times, "mlx")
            for k in step:
                step[k] += per_step * times.get(k, times["mlx"])
        print(f"M={M:<2} one step's 121 projections: mlx {1e3 * step['mlx']:.3f} ms, "
              f"with qmm_rows {1e3 * step['qmm_rows']:.3f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
