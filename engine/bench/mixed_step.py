"""One step with decode rows and a prompt chunk: one mixed forward vs two forwards.

    PYTHONPATH=. python -m engine.bench.mixed_step [--model PATH | synthetic:NAME]
        [--decode 7] [--chunks 16,64,256] [--repeats 15] [--compile-chunks]

For each chunk length: the median seconds of a calm decode step (the decode rows
alone), of the same step with the chunk as two forwards (Runner.decode then
Runner.prefill, EngineConfig.mixed_forward=False) and as one (Runner.mixed),
alternating, after one untimed run of each shape. "extra" is the time beyond the calm
step, what the prefill budget spends (engine/core/prefill_budget.py). The steps
repeat the same rows and positions, so every repetition does the same work. It runs
the model on this thread (no Engine): a tool, not the app.
"""
from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx

from engine.bench.runs import add_moe_max_pairs_arg, apply_moe_max_pairs
from engine.bench.synthetic import SYNTHETIC_PREFIX, synthetic_in_memory
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.loading.model_bundle import load_bundle

CONTEXT = 64        # tokens each decode row has in its cache


def _runner(model_arg: str | None, decode: int, longest: int,
            compile_chunks: bool = False) -> Runner:
    pages_per_row = -(-(max(CONTEXT, longest) + 16) // 16)
    config = EngineConfig(max_num_seqs=decode + 1, page_size=16, prefix_cache=False,
                          num_pages=(decode + 1) * pages_per_row + 1,
                          prefill_chunk=longest, max_context=max(CONTEXT, longest) + 16,
                          compile_chunks=compile_chunks)
    source = (synthetic_in_memory(model_arg.removeprefix(SYNTHETIC_PREFIX))
              if model_arg and model_arg.startswith(SYNTHETIC_PREFIX) else model_arg)
    runner = Runner(load_bundle(source, config).model, config)
    mx.eval(runner.cache_arrays())
    return runner


def stream_rows(decode: int, pages_per_row: int) -> tuple[list[Sequence], Sequence]:
    """decode rows with CONTEXT tokens each, and a new prompt's sequence."""
    def seq(i: int, n: int) -> Sequence:
        s = Sequence(i, [10 + (i * 7 + j) % 50 for j in range(n)])
        s.pages = list(range(1 + i * pages_per_row, 1 + (i + 1) * pages_per_row))
        s.slot, s.prefill_target = i, n
        return s
    streams = [seq(i, CONTEXT) for i in range(decode)]
    for s in streams:
        s.num_computed = CONTEXT - 1
    return streams, seq(decode, pages_per_row * 16 - 16)


def _timed(run, runner: Runner) -> float:
    t0 = time.perf_counter()
    mx.eval(run(), runner.cache_arrays())
    return time.perf_counter() - t0


def measure(runner: Runner, streams, prompt: Sequence, n: int, repeats: int) -> dict:
    chunk = [PrefillChunk(prompt, 0, n)]
    ways = {"calm": lambda: runner.decode(streams),
            "two forwards": lambda: (runner.decode(streams), runner.prefill(chunk)),
            "mixed": lambda: runner.mixed(streams, chunk)}
    for run in ways.values():
        _timed(run, runner)                     # compile / first-touch, untimed
    times = {name: [] for name in ways}
    for _ in range(repeats):
        for name, run in ways.items():
            times[name].append(_timed(run, runner))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m engine.bench.mixed_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model path, or synthetic:NAME")
    p.add_argument("--decode", type=int, default=7, help="decode rows")
    p.add_argument("--chunks", default="16,64,256", help="prompt chunk lengths")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--compile-chunks", action="store_true",
                   help="EngineConfig.compile_chunks: the chunk and mixed forwards compiled")
    add_moe_max_pairs_arg(p)
    args = p.parse_args()
    apply_moe_max_pairs(args)
    chunks = [int(c) for c in args.chunks.split(",") if c]
    runner = _runner(args.model, args.decode, max(chunks), args.compile_chunks)
    streams, prompt = stream_rows(args.decode, -(-(max(CONTEXT, max(chunks)) + 16) // 16))
    print(f"# {args.decode} decode rows + a prompt chunk; device {mx.default_device()}; "
          f"fixed shapes {runner.fixed_shapes}; compiled chunks "
          f"{runner.compiled_chunks is not None}; medians of {args.repeats}, alternating")
    print("| chunk | calm ms | two forwards ms (extra) | mixed ms (extra) | extra saved |")
    print("|---|---|---|---|---|")
    for n in chunks:
        t = measure(runner, streams, prompt, n, args.repeats)
        two, one = t["two forwards"] - t["calm"], t["mixed"] - t["calm"]
        print(f"| {n} | {1000 * t['calm']:.1f} | {1000 * t['two forwards']:.1f} "
              f"({1000 * two:+.1f}) | {1000 * t['mixed']:.1f} ({1000 * one:+.1f}) | "
              f"{100 * (1 - one / two) if two > 0 else float('nan'):.0f}% |", flush=True)


if __name__ == "__main__":
    main()
