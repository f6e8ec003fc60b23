"""Which layout of kernels/qmm_rows.py reads each projection of the decode step fastest.

At B=16 on the H100 (session 46, engine/bench/kernel_time.py) the step's 81 4-bit
projections took 1.10 ms for ~1.0 GB of weights (~0.9 TB/s against a 3.35 TB/s copy
rate), and 8 tiles a warp (x read once a weight read) made the large ones slower (24.3
against ~18.3 us): the kernel looks short of loads in flight, not of L2 bandwidth. This
sweeps the two numbers that set how many warps a projection has and how much each
carries: NT (8-column output tiles a warp, so 8 NT weight rows a block) and KSPLIT (warps
a block, splitting K), for the Qwen3.5-35B-A3B shapes of kernels/bench/qmm_rows.py, and
prints each layout's GPU time a call (torch.profiler's CUPTI: kernel durations only, not
the host's launch cost) and weight bytes a second, the default's, and one step's 121
calls (81 4-bit, 40 8-bit) at the default against the best layout of each shape. Every layout's output is
checked against the default's first (float32 sums split differently: rounding only).
Weights cycle through copies of at least 256 MB, so each call reads them from memory as
the step does. CUDA and torch only; elsewhere it says so and stops.

Run: python3 -m kernels.bench.qmm_rows_sweep [--rows 16,32]
"""
from __future__ import annotations

import argparse
import itertools
import sys

import mlx.core as mx

import kernels.qmm_rows as qr
from kernels.backend import gpu_backend
from kernels.bench.common import cuda_kernel_events
from kernels.bench.qmm_rows import COLD_BYTES, SHAPES

TILES = (1, 2, 4)
WARPS = (4, 8, 16)
CALLS = 20
AGREE = 2.0 ** -6      # |layout - default| / max |default|: bf16 outputs, float32 sums


def layouts(M: int, N: int, K: int) -> list[tuple[int, int]]:
    """(nt, ksplit) pairs that fit [M, K] x N, the default's (`qr.layout`) first."""
    default = qr.layout(M, N, K)
    rest = [(nt, ks) for nt, ks in itertools.product(TILES, WARPS)
            if (nt, ks) != default and qr.layout_fits(M, N, K, nt, ks)]
    return [default, *rest]


def weight_bytes(N: int, K: int, bits: int, group: int = 64) -> int:
    """Packed weights plus a bf16 scale and bias a group."""
    return N * K * bits // 8 + 2 * 2 * N * (K // group)


def gpu_us_per_call(fn, calls: int = CALLS) -> float:
    """The mean duration of the CUDA kernels fn's calls launch, in us (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
    spans = [e.time_range.end - e.time_range.start for e in cuda_kernel_events(prof)
             if "qmm_rows" in e.name]
    return sum(spans) / calls


def cold_copies(N: int, K: int, bits: int) -> list:
    copies = max(1, -(-COLD_BYTES // weight_bytes(N, K, bits)))
    out = []
    for c in range(copies):
        w = mx.random.normal((N, K), key=mx.random.key(N + K + c)) * K ** -0.5
        out.append(mx.quantize(w.astype(mx.bfloat16), group_size=64, bits=bits))
        mx.eval(out[-1])
    return out


def sweep_shape(M: int, name: str, N: int, K: int, bits: int, backend: str) -> dict:
    """{(nt, ksplit): us a call} for one shape; a layout whose output is off is left out."""
    weights = cold_copies(N, K, bits)
    x = mx.random.normal((M, K), key=mx.random.key(M)).astype(mx.bfloat16)
    first = weights[0]
    want = qr.kernel(x, *first, 64, bits, backend=backend).astype(mx.float32)
    scale = mx.max(mx.abs(want)).item()
    times = {}
    for nt, ks in layouts(M, N, K):
        got = qr.kernel(x, *first, 64, bits, backend=backend, nt=nt, ksplit=ks)
        off = mx.max(mx.abs(got.astype(mx.float32) - want)).item() / scale
        if off > AGREE:
            print(f"  {name} NT {nt} KSPLIT {ks}: off by {off:.1e} of max |y|: left out")
            continue
        cold = itertools.cycle(weights)
        times[(nt, ks)] = gpu_us_per_call(
            lambda: mx.eval(qr.kernel(x, *next(cold), 64, bits, backend=backend,
                                      nt=nt, ksplit=ks)))
    del weights
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="16,32", help="decode rows M, comma-separated")
    args = parser.parse_args(argv)
    backend = gpu_backend()
    print(f"qmm_rows layout sweep  backend={backend}  device={mx.default_device()}")
    try:
        import torch.profiler  # noqa: F401
    except ImportError:
        print("no torch here: no GPU kernel times")
        return 0
    if backend != "cuda":
        print("no CUDA backend: nothing to sweep")
        return 0
    for M in (int(r) for r in args.rows.split(",")):
        step_default = step_best = 0.0
        for name, (N, K, per_step, bits) in SHAPES.items():
            times = sweep_shape(M, name, N, K, bits, backend)
            default = layouts(M, N, K)[0]
            best = min(times, key=times.get)
            mb = weight_bytes(N, K, bits) / 1e6          # MB / us = TB/s
            cells = "  ".join(f"{nt}x{ks}={us:.1f}" for (nt, ks), us in sorted(times.items()))
            print(f"M={M:<2} {name:12s} {N}x{K} {bits}-bit: default NT {default[0]} KSPLIT "
                  f"{default[1]} {times[default]:.1f} us ({mb / times[default]:.2f} TB/s), best "
                  f"NT {best[0]} KSPLIT {best[1]} {times[best]:.1f} us "
                  f"({mb / times[best]:.2f} TB/s) | {cells}", flush=True)
            step_default += per_step * times[default]
            step_best += per_step * times[best]
        print(f"M={M:<2} one step's projections: default {step_default / 1e3:.3f} ms, "
              f"best layout each {step_best / 1e3:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
