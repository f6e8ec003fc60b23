"""The decode step's quantized projections: kernels/qmm_rows.py against mx.quantized_matmul.

The Qwen3.5-35B-A3B shapes (group 64, bf16; the joined Gated DeltaNet input projection
padded to a multiple of 128 rows as on a GPU, its output projection, the attention's
joined q/gate/k/v and o projections, the head; the 8-bit router joined with the shared
expert's gate, 257 rows padded to 384) at M = 1, 2, 4, 8, 16, 32 rows, and one step's
worth (30 + 30 + 10 + 10 + 1 4-bit calls, as kernel_time counts 81, and 40 8-bit ones). M = 1 is MLX's
`qmv` on both sides unless --one-row (the kernel's contract starts at 2 rows; this
says whether it should start at 1). Each call reads the next of several copies of the
weight, 256 MB of them at least: in a step every projection's weights come from memory,
and one 12 MB weight called 20 times over stays in the H200's 50 MB L2 (session 20's
first run of this bench did that: MLX's tiled kernel read 30 us at M=16 here against
46 us in the engine's step).
Wall clock per call, 20 calls queued: for kernels of 10-40 us that is mostly the host's
launch cost (a custom kernel's more than MLX's own), so the GPU's time is
engine/bench/kernel_time.py's (session 20: MLX's qmm_sm80 46 us a call in the B=16 step
against qmm_rows' 13.6; here 24-35 us against 26-43).
Run: PYTHONPATH=. python -m kernels.bench.qmm_rows [--one-row]
"""
from __future__ import annotations

import itertools
import sys

import mlx.core as mx

import kernels.qmm_rows as qr
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report

# name: (N, K, calls a step, bits)
SHAPES = {"gdn in_proj": (12416, 2048, 30, 4), "gdn out_proj": (2048, 4096, 30, 4),
          "attn qkv": (9216, 2048, 10, 4), "attn o_proj": (2048, 4096, 10, 4),
          "head": (248320, 2048, 1, 4), "router+gate": (384, 2048, 40, 8)}
COLD_BYTES = 256 * 2 ** 20      # the weight copies a shape cycles through, at least


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
        copies = max(1, -(-COLD_BYTES // (N * K * bits // 8)))
        weights[name] = []
        for c in range(copies):
            w = (mx.random.normal((N, K), key=mx.random.key(N + K + c)) * K ** -0.5)
            weights[name].append(mx.quantize(w.astype(mx.bfloat16), group_size=64, bits=bits))
            mx.eval(weights[name][-1])
    for M in (1, 2, 4, 8, 16, 32):
        step = {"mlx": 0.0, "qmm_rows": 0.0}
        for name, (N, K, per_step, bits) in SHAPES.items():
            x = mx.random.normal((M, K), key=mx.random.key(M)).astype(mx.bfloat16)
            mx.eval(x)
            cold = itertools.cycle(weights[name])
            fns = {"mlx": lambda: mx.quantized_matmul(x, *next(cold), transpose=True,
                                                      group_size=64, bits=bits)}
            if qr.applies(x, *weights[name][0], 64, bits):
                fns["qmm_rows"] = lambda: qr.kernel(x, *next(cold), 64, bits, backend=backend)
            times = compare(fns, calls=20, rounds=5)
            report(f"M={M:<2} {name} {N}x{K}", times, "mlx")
            for k in step:
                step[k] += per_step * times.get(k, times["mlx"])
        print(f"M={M:<2} one step's 121 projections: mlx {1e3 * step['mlx']:.3f} ms, "
              f"with qmm_rows {1e3 * step['qmm_rows']:.3f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
