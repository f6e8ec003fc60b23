"""One worker of engine/loading/mlx_prewarm.py: runs each op it is given once, so that
MLX compiles that op's CUDA kernel module into MLX_PTX_CACHE_DIR (the parent's).

Run as a script (``python mlx_prewarm_worker.py JSON``), never imported by the engine:
it imports only mlx, and its CUDA context is its own. JSON is a list of ops:
  {"op": "qmm", "dtype": "bfloat16", "bits": 4, "group_size": 64, "mode": "affine",
   "rows": 64, "k": 2048, "n": 512}
Prints one line an op: its seconds, or the error (the parent only counts them: a failed
op costs nothing but the parent compiling that module itself, as without a worker).
"""
from __future__ import annotations

import json
import sys
import time


def run_op(op: dict):
    import mlx.core as mx
    if op["op"] != "qmm":
        raise ValueError(f"unknown op {op['op']!r}")
    dtype = getattr(mx, op["dtype"])
    bits, group, mode = op["bits"], op["group_size"], op.get("mode", "affine")
    packed = mx.zeros((op["n"], op["k"] * bits // 32), dtype=mx.uint32)
    scales = mx.ones((op["n"], op["k"] // group), dtype=dtype)
    biases = mx.zeros_like(scales) if mode == "affine" else None
    x = mx.zeros((op["rows"], op["k"]), dtype=dtype)
    return mx.quantized_matmul(x, packed, scales, biases, transpose=True,
                               group_size=group, bits=bits, mode=mode)


def main(argv: list[str]) -> int:
    import mlx.core as mx
    failed = 0
    for op in json.loads(argv[1]):
        t0 = time.perf_counter()
        try:
            mx.eval(run_op(op))
            print(f"ok {time.perf_counter() - t0:.2f} {json.dumps(op)}", flush=True)
        except Exception as e:   # noqa: BLE001 -- any failure: the parent compiles it itself
            failed += 1
            print(f"failed {type(e).__name__}: {e} {json.dumps(op)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
