"""What a first start on CUDA compiles, one MLX kernel module at a time (issue 23, item 5).

MLX 0.32's CUDA backend compiles some of its own kernels with NVRTC the first time a
process meets them and keeps them in MLX_PTX_CACHE_DIR: the quantized matmuls' tiles
(qmm_sm80_*: one module per dtype, bits, group size and row tile), the gathers and
scatters (per dtype and index dtype), fused elementwise graphs. A cold start of the
built-in model's shape spent 210 s in its warm-up (docs/PERFORMANCE.md): this says which
modules those seconds go to, and whether compiling them in several processes at once
(each meeting different modules) takes the serial wait away.

    python3 -m engine.bench.mlx_jit_cost --cache /tmp/ptx-a              # one process
    python3 -m engine.bench.mlx_jit_cost --cache /tmp/ptx-b --parallel 8  # 8 at a time

Each trigger is one small op; the modules it added to the cache are named beside its
seconds. On a CPU nothing is compiled (every trigger reports no module).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from engine.kernel_cache import compiled_modules

# (dtype, bits, group size, K, N) of the quantized matmuls in the two shapes we ship:
# SmolLM2 (4-bit, group 32, hidden 576) and Qwen3.5-35B-A3B (4-bit experts, 8-bit gates).
_QMM = {"q4g32": ("bfloat16", 4, 32, 576, 1536), "q4g64": ("bfloat16", 4, 64, 2048, 512),
        "q8g64": ("bfloat16", 8, 64, 2048, 256)}
_ROWS = (1, 8, 16, 32, 64, 512)


def _qmm(spec: str, m: int):
    import mlx.core as mx
    dtype, bits, group, k, n = _QMM[spec]
    w = mx.random.normal((n, k)).astype(getattr(mx, dtype))
    wq, scales, biases = mx.quantize(w, group_size=group, bits=bits)
    x = mx.random.normal((m, k)).astype(getattr(mx, dtype))
    return mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=group, bits=bits)


def _gather(dtype: str, index: str):
    import mlx.core as mx
    table = mx.zeros((64, 32), dtype=getattr(mx, dtype))
    return mx.take(table, mx.array([3, 1, 7], dtype=getattr(mx, index)), axis=0)


def _scatter(dtype: str):
    import mlx.core as mx
    a = mx.zeros((64, 32), dtype=getattr(mx, dtype))
    a[mx.array([3, 1], dtype=mx.int32)] = mx.ones((2, 32), dtype=getattr(mx, dtype))
    return a


def _gather_axis():
    import mlx.core as mx
    return mx.take_along_axis(mx.zeros((4, 64)), mx.zeros((4, 8), dtype=mx.int32), axis=-1)


def _fused():
    import mlx.core as mx
    f = mx.compile(lambda a, b: mx.sigmoid(a) * b)
    return f(mx.zeros((4, 64), dtype=mx.bfloat16), mx.ones((4, 64), dtype=mx.bfloat16))


def triggers() -> dict:
    out = {f"{spec}_m{m}": (lambda s=spec, m=m: _qmm(s, m)) for spec in _QMM for m in _ROWS}
    for dtype in ("bfloat16", "float32", "uint32", "int32"):
        for index in ("int32", "uint32"):
            out[f"gather_{dtype}_{index}"] = lambda d=dtype, i=index: _gather(d, i)
    for dtype in ("bfloat16", "float32"):
        out[f"scatter_{dtype}"] = lambda d=dtype: _scatter(d)
    out["gather_axis_float32"] = _gather_axis
    out["fused_sigmoid_mul"] = _fused
    return out


def run_serial(cache: Path, names: list[str]) -> None:
    import mlx.core as mx
    table = triggers()
    mx.eval(mx.zeros(1) + 1)                     # the device's start is not a module's cost
    for name in names:
        before = compiled_modules(cache)
        t0 = time.perf_counter()
        mx.eval(table[name]())
        dt = time.perf_counter() - t0
        new = sorted(compiled_modules(cache) - before)
        print(f"{name:24s} {dt:8.2f} s  {', '.join(new) or '(nothing compiled)'}", flush=True)


def run_parallel(cache: Path, names: list[str], workers: int) -> None:
    env = {**os.environ, "MLX_PTX_CACHE_DIR": str(cache)}
    t0 = time.perf_counter()
    pending, running = list(names), []
    while pending or running:
        while pending and len(running) < workers:
            name = pending.pop(0)
            cmd = [sys.executable, "-m", "engine.bench.mlx_jit_cost", "--cache", str(cache),
                   "--only", name]
            running.append(subprocess.Popen(cmd, env=env))
        running = [p for p in running if p.poll() is None]
        time.sleep(0.05)
    print(f"# {len(names)} triggers in {workers} processes: {time.perf_counter() - t0:.1f} s "
          f"wall, {len(compiled_modules(cache))} modules in {cache}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="MLX_PTX_CACHE_DIR for this run (fresh)")
    ap.add_argument("--only", default="", help="comma-separated trigger names (default: all)")
    ap.add_argument("--parallel", type=int, default=0, help="one process a trigger, N at once")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    names = [n for n in args.only.split(",") if n] or list(triggers())
    if args.parallel:
        run_parallel(cache, names, args.parallel)
        return
    if os.environ.get("MLX_PTX_CACHE_DIR") != str(cache):   # MLX reads it at import
        os.environ["MLX_PTX_CACHE_DIR"] = str(cache)
    run_serial(cache, names)


if __name__ == "__main__":
    main()
