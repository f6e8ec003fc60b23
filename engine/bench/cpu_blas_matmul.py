"""Does MLX bind to the optimized BLAS? A 374x576 @ 576x1536 float32 matmul on the CPU,
with engine/cpu_blas.py's library and with MLX's own (TANDEM_CPU_BLAS=off), each in a
fresh subprocess (the choice is made once per process), alternating, medians.

    PYTHONPATH=. python -m engine.bench.cpu_blas_matmul --rounds 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

M, K, N = 374, 576, 1536
CHILD = f"""
import time, engine, mlx.core as mx
from engine.cpu_blas import blas_info
mx.set_default_device(mx.cpu)
a, b = mx.random.normal(({M}, {K})), mx.random.normal(({K}, {N}))
mx.eval(a, b)
ts = []
for _ in range(12):
    t = time.perf_counter(); mx.eval(a @ b); ts.append(time.perf_counter() - t)
print(blas_info().name, sorted(ts)[len(ts) // 2])
"""


def _run(choice: str) -> tuple[str, float]:
    env = {**os.environ, "TANDEM_CPU_BLAS": choice}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
    name, seconds = out.rsplit(" ", 1)
    return name, float(seconds)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for choice in ("", "off"):             # "" = the default (MKL where installed)
            name, s = _run(choice)
            times.setdefault(name, []).append(s)
            print(f"{name}: {s * 1e3:.1f} ms", flush=True)
    for name, xs in times.items():
        s = statistics.median(xs)
        print(f"| {name} | {s * 1e3:.1f} ms | {2 * M * K * N / s / 1e9:.1f} GFLOP/s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
