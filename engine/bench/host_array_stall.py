"""Does an array made from host values wait for the GPU's queued work? (MLX 0.32, CUDA)

    PYTHONPATH=. python -m engine.bench.host_array_stall [--busy-ms 50] [--repeats 5]
        [--size 4096]

MLX 0.32's CUDA allocator keeps freed device buffers and host (unified) buffers in one
cache, by size alone, and hands a host array (`mx.array(numpy)`) whatever buffer of its
size class it finds; a device one is first moved to unified memory with a synchronous
`cudaMemcpy` (mlx/backend/cuda/allocator.cpp, `move_to_unified_memory`). A decode step
makes such an array (its index upload, engine/core/host_arrays.py: 52 bytes at B=1)
while the step before it still runs. If that copy waited for the queued work, the
engine's queue-ahead would be lost in some steps and not others: one explanation of B=1
running 4.4 ms a step in some processes and 7-9 ms in others (docs/PERFORMANCE.md).

Here, per case: queue ~--busy-ms of GPU work (matmuls), then time making a 13-int32
array from numpy while it runs, then the wait for the work. "device buffer cached": a
freed 64-byte device buffer sits in MLX's cache first (the size class of the upload);
"cache empty": none does. A stall shows as the array's time near the work's. On a CPU
(one memory) both cases are quick: nothing to move. Timing only: not a test.
"""
from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np

UPLOAD = np.arange(13, dtype=np.int32)      # a B=1 decode view: 52 bytes, class 64


def _busy(a: mx.array, ms: float) -> mx.array:
    """Matmuls on `a` (evaluated), ~ms of work on an H100 at a side of 4,096 (lazy)."""
    for _ in range(max(1, int(ms / 0.6))):     # ~0.6 ms a 4,096^3 float32 matmul there
        a = mx.tanh(a @ a)
    return a


def _cache_a_device_buffer() -> None:
    """A 64-byte array made by a kernel, evaluated and dropped: its buffer goes to the cache."""
    x = mx.zeros((16,), mx.float32) + 1.0
    mx.eval(x)
    del x


def one(case: str, busy_ms: float, size: int = 4096) -> tuple[float, float]:
    """(seconds to make the host array, seconds until the queued work was done)."""
    mx.synchronize()
    mx.clear_cache()
    a = mx.random.normal((size, size)) * 1e-2
    mx.eval(a)
    if case == "device buffer cached":        # after a's small temporaries, before the work
        _cache_a_device_buffer()
    work = _busy(a, busy_ms)                  # its buffers are large: none takes the 64
    mx.async_eval(work)
    t0 = time.perf_counter()
    host = mx.array(UPLOAD)
    t1 = time.perf_counter()
    mx.eval(work, host)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--busy-ms", type=float, default=50.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--size", type=int, default=4096, help="the matmuls' side (a CPU: 256)")
    args = p.parse_args(argv)
    print(f"# device: {mx.default_device()}; MLX {mx.__version__}", flush=True)
    one("cache empty", args.busy_ms, args.size)            # compile and warm
    for case in ("device buffer cached", "cache empty"):
        made, done = zip(*(one(case, args.busy_ms, args.size) for _ in range(args.repeats)))
        print(f"{case}: making the host array {1e3 * statistics.median(made):.3f} ms "
              f"(max {1e3 * max(made):.3f}), the queued work done after "
              f"{1e3 * statistics.median(done):.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
