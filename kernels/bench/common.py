"""Timing helpers for the kernel micro-benchmarks (scripts, never tests).

Each measurement queues `calls` invocations into one graph and evaluates them
together, so launch overhead counts as it does inside a model forward; A and
B alternate round by round and the median of the rounds is reported.
"""
from __future__ import annotations

import statistics
import time

import mlx.core as mx


def time_per_call(fn, calls: int) -> float:
    """Seconds per call of fn() (fn returns arrays to evaluate)."""
    t0 = time.perf_counter()
    outs = [fn() for _ in range(calls)]
    mx.eval(outs)
    mx.synchronize()
    return (time.perf_counter() - t0) / calls


def compare(fns: dict, calls: int = 20, rounds: int = 5, warmup: int = 2) -> dict:
    """name -> median seconds per call, alternating the candidates each round."""
    for fn in fns.values():
        for _ in range(warmup):
            time_per_call(fn, max(1, calls // 4))
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(time_per_call(fn, calls))
    return {name: statistics.median(v) for name, v in samples.items()}


def report(title: str, times: dict, baseline: str) -> None:
    base = times[baseline]
    cells = "  ".join(f"{n}={1e6 * t:9.1f}us (x{base / t:6.2f})" for n, t in times.items())
    print(f"{title:<28} {cells}", flush=True)


def cuda_kernel_events(prof) -> list:
    """The CUDA kernels among a torch.profiler session's events (CUPTI's GPU times)."""
    return [e for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))]
