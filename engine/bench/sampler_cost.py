"""Micro-benchmark: what `sample_batch` alone costs per decode step.

    PYTHONPATH=. python -m engine.bench.sampler_cost [--baseline REF] [--rounds 10]
        [--top-p-kernel] [--shapes 248320x1,248320x8] [--kernels]

Times `engine/core/sampler.py`'s `sample_batch` (evaluated, so the lazy graph runs)
on random normal x3 logits at the app's default sampling (temperature 0.7, top_p
0.95), temperature 0.7 alone, and greedy, for the built-in model's vocabulary
(49,152) and Qwen3.5's (248,320), B = 1 and 8. With --baseline REF, the sampler
as committed at git REF (e.g. `main`) runs too, alternating with this tree's call
by call in the same process, so machine load hits both alike.
--top-p-kernel: this tree's sampler twice, by bisection and with the self-tested kernel
set (kernels/top_p_cut.py where it passes; a GPU).
--kernels (the GPU machine, where torch is installed): each call's CUDA kernels,
count and GPU time (engine/bench/kernel_time.py's table). Prints medians in ms.
Timings live here, never in the tests.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine.core import sampler as current
from engine.sampling_params import SamplingParams

SETTINGS = {"t0.7 top_p0.95": {"temperature": 0.7, "top_p": 0.95},
            "t0.7": {"temperature": 0.7, "top_p": 1.0},
            "greedy": {"temperature": 0.0, "top_p": 1.0}}
SHAPES = [(49152, 1), (49152, 8), (248320, 1), (248320, 8)]


def load_baseline(ref: str):
    """The sampler module as committed at `ref` (or the file at that path: a machine
    without the repository's history), imported under another name."""
    if Path(ref).is_file():
        text = Path(ref).read_text()
    else:
        text = subprocess.run(["git", "show", f"{ref}:engine/core/sampler.py"], check=True,
                              capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_sampler.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("baseline_sampler", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WithKernels:
    """A sampler module whose calls pass the kernel set the engine would load with."""

    def __init__(self, module):
        from kernels.selftest import select_kernels
        self.module, self.kernels = module, select_kernels()
        self.RowSampler = module.RowSampler
        print(f"# kernel set: top_p_cut {self.kernels.status()['top_p_cut']}", flush=True)

    def sample_batch(self, logits, states):
        return self.module.sample_batch(logits, states, self.kernels)


def _call(module, logits: mx.array, params: SamplingParams):
    states = [module.RowSampler(params) for _ in range(logits.shape[0])]
    mx.eval([s.key for s in states])
    return lambda: mx.eval(module.sample_batch(logits, states))


def time_once(module, logits: mx.array, params: SamplingParams) -> float:
    run = _call(module, logits, params)
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def bench(modules: dict, rounds: int, shapes=SHAPES, kernels: bool = False) -> None:
    print(f"{'vocab':>7} {'B':>2} {'setting':<15} " + " ".join(f"{n:>10}" for n in modules))
    for vocab, batch in shapes:
        rng = np.random.default_rng(0)
        logits = mx.array(rng.normal(size=(batch, vocab)).astype(np.float32) * 3)
        mx.eval(logits)
        for label, setting in SETTINGS.items():
            params = SamplingParams(**setting)
            times = {name: [] for name in modules}
            for _ in range(rounds + 1):  # the first call of each warms up
                for name, module in modules.items():
                    times[name].append(time_once(module, logits, params))
            medians = [statistics.median(t[1:]) for t in times.values()]
            print(f"{vocab:>7} {batch:>2} {label:<15} "
                  + " ".join(f"{m:>10.2f}" for m in medians), flush=True)
            if kernels and setting["temperature"] > 0:
                from engine.bench.kernel_time import kernel_table
                for name, module in modules.items():
                    kernel_table(_call(module, logits, params), 4,
                                 f"  {vocab} B={batch} {label} {name}", top=6)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="git ref (or a file) whose sampler runs alongside "
                    "(e.g. main); with --top-p-kernel, with the kernel set too")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--top-p-kernel", action="store_true",
                    help="also this tree's sampler with the kernel set (kernels/top_p_cut)")
    ap.add_argument("--shapes", help="VOCABxB,... (default: 49152 and 248320 at B = 1, 8)")
    ap.add_argument("--kernels", action="store_true", help="CUDA kernel tables (torch)")
    args = ap.parse_args(argv)
    modules = {"this tree": current}
    if args.top_p_kernel:
        modules = {**modules, "kernel": WithKernels(current)}
    if args.baseline:
        baseline = load_baseline(args.baseline)
        modules = {f"{args.baseline}": baseline, **modules}
        if args.top_p_kernel:
            modules[f"{args.baseline} kernel"] = WithKernels(baseline)
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(n) for n in item.split("x")) for item in args.shapes.split(",")]
    bench(modules, args.rounds, shapes, args.kernels)


if __name__ == "__main__":
    sys.exit(main())
