"""What one graph node costs the host when MLX evaluates it, by kind of node.

    PYTHONPATH=. python -m engine.bench.node_cost [--nodes 400] [--repeats 15]

A compiled decode step is replayed as a graph whose every node MLX's host walks and
encodes each step; on CUDA a B=1 step is bound by that host time, not the GPU
(docs/PERFORMANCE.md). This times `mx.async_eval` alone (the graph is built before the
clock starts, and evaluated to completion after it stops) on chains of N nodes of one
kind: views (Reshape back and forth, Slice), ordering edges (Depends) and small launches
(a [1, 64] x [64, 64] matmul each), and prints the median microseconds a node. So what
removing a kind of node from the step buys is measured on the machine, not assumed.
Timing only: nothing here belongs in a test.
"""
from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx


def _reshapes(x: mx.array, n: int) -> mx.array:
    for i in range(n):
        x = x.reshape((8, 8) if i % 2 == 0 else (1, 64))
    return x


def _slices(x: mx.array, n: int) -> mx.array:
    x = mx.concatenate([x] * ((n + 63) // 64 + 1), axis=1)          # room for n slices
    for _ in range(n):
        x = x[:, 1:]
    return x


def _depends(x: mx.array, n: int) -> mx.array:
    for _ in range(n):
        (x,) = mx.depends([x], [x])
    return x


def _matmuls(x: mx.array, n: int, w: mx.array) -> mx.array:
    for _ in range(n):
        x = x @ w
    return x


def _median_us(build, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        out = build()
        t0 = time.perf_counter()
        mx.async_eval(out)
        times.append(time.perf_counter() - t0)
        mx.eval(out)
    return 1e6 * statistics.median(times[1:])       # the first traces kernels: untimed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.node_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=400)
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    w = mx.random.normal((64, 64)) / 8
    mx.eval(w)
    kinds = {"Reshape": _reshapes, "Slice": _slices, "Depends": _depends,
             "matmul launch": lambda x, n: _matmuls(x, n, w)}
    print(f"# {mx.default_device()}, chains of {args.nodes} nodes, mx.async_eval host "
          f"time, medians of {args.repeats}")
    print("| node | us a node |")
    print("|---|---|")
    for name, chain in kinds.items():
        # Each build starts from a fresh input (an evaluated array is no graph).
        def build(n):
            return lambda: chain(mx.random.normal((1, 64)) + 0, n)
        base = _median_us(build(0), args.repeats)
        full = _median_us(build(args.nodes), args.repeats)
        print(f"| {name} | {(full - base) / args.nodes:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
