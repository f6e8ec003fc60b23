"""One step with decode rows and a prompt chunk: one mixed forward vs two forwards.

    PYTHONPATH=. python -m engine.bench.mixed_step [--model PATH | synthetic:NAME]
        [--decode 7] [--chunks 16,64,256] [--repeats 15] [--compile-chunks]
        [--pieces 2,4]

For each chunk length: the median seconds of a calm decode step (the decode rows
alone), of the same step with the chunk as two forwards (Runner.decode then
Runner.prefill, EngineConfig.mixed_forward=False) and as one (Runner.mixed),
alternating, after one untimed run of each shape. "extra" is the time beyond the calm
step, what the prefill budget spends (engine/core/prefill_budget.py). The steps
repeat the same rows and positions, so every repetition does the same work. It runs
the model on this thread (no Engine): a tool, not the app.

--pieces K: the chunk's forward also run in K layer ranges (engine/models/layer_pieces.py),
each beside a decode step of its own, as a step loop reading a chunk over K steps would;
a second table gives each way's longest step, its steps' sum, and the TTFT ratio a prompt
read that way from start to end would have against the chunk read alone at the longest
length (every step evaluated before the next: no pipelining, host and device add up).
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
from engine.models.layer_pieces import Carry, layer_bounds

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


def measure_pieces(runner: Runner, streams, prompt: Sequence, n: int, pieces: int,
                   repeats: int) -> list[float]:
    """Median seconds of each of the `pieces` steps that read an n-token chunk a layer
    range at a time beside a decode step of the streams (the chunk's inputs built once,
    by its first step, as a step loop would keep them)."""
    chunk = [PrefillChunk(prompt, 0, n)]
    bounds = layer_bounds(len(runner.model.layers), pieces)

    def run_all() -> list[float]:
        inputs, carry, times = runner.prefill_inputs(chunk), None, []
        for span in bounds:
            t0 = time.perf_counter()
            out = runner.prefill_piece(chunk, span, carry, inputs)
            parts = [out.h] if isinstance(out, Carry) else [out]
            mx.eval(runner.decode(streams), *parts, runner.cache_arrays())
            times.append(time.perf_counter() - t0)
            carry = out if isinstance(out, Carry) else None
        return times

    run_all()                                   # first touch of each piece, untimed
    runs = [run_all() for _ in range(repeats)]
    return [statistics.median(r[i] for r in runs) for i in range(pieces)]


def pieces_table(runner: Runner, streams, prompt: Sequence, whole: dict[int, dict],
                 pieces: list[int], repeats: int, floor_s: float) -> None:
    """Each way to read each chunk length beside the streams: whole (one step, as the
    first table measured it: `whole`, measure()'s times by length) or in K layer pieces
    (K steps); TTFT ratio = the ways' seconds a token over the alone ones."""
    chunks = list(whole)
    alone = _median_alone(runner, prompt, max(chunks), repeats) / max(chunks)
    calm = statistics.median(t["calm"] for t in whole.values())
    print(f"\n# read alone at {max(chunks)} tokens: {1000 * alone:.3f} ms a token; calm step "
          f"{1000 * calm:.1f} ms; floor {1000 * floor_s:.0f} ms")
    print("| chunk | pieces | steps ms | longest step ms | within the floor | tokens/s "
          "beside the streams | TTFT ratio |")
    print("|---|---|---|---|---|---|---|")
    for n in chunks:
        for k in [1] + [k for k in pieces if k > 1]:
            steps = (measure_pieces(runner, streams, prompt, n, k, repeats) if k > 1 else
                     [whole[n]["two forwards"]])
            total = sum(steps)
            print(f"| {n} | {k} | {', '.join(f'{1000 * t:.1f}' for t in steps)} | "
                  f"{1000 * max(steps):.1f} | {'yes' if max(steps) <= floor_s else 'no'} | "
                  f"{n / total:.0f} | {total / n / alone:.2f}x |", flush=True)


def _median_alone(runner: Runner, prompt: Sequence, n: int, repeats: int) -> float:
    chunk = [PrefillChunk(prompt, 0, n)]
    _timed(lambda: runner.prefill(chunk), runner)
    return statistics.median(_timed(lambda: runner.prefill(chunk), runner)
                             for _ in range(repeats))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m engine.bench.mixed_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model path, or synthetic:NAME")
    p.add_argument("--decode", type=int, default=7, help="decode rows")
    p.add_argument("--chunks", default="16,64,256", help="prompt chunk lengths")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--compile-chunks", action="store_true",
                   help="EngineConfig.compile_chunks: the chunk and mixed forwards compiled")
    p.add_argument("--pieces", default="",
                   help="also read each chunk in K layer pieces, one a step (e.g. 2,4)")
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
    whole = {}
    for n in chunks:
        t = whole[n] = measure(runner, streams, prompt, n, args.repeats)
        two, one = t["two forwards"] - t["calm"], t["mixed"] - t["calm"]
        print(f"| {n} | {1000 * t['calm']:.1f} | {1000 * t['two forwards']:.1f} "
              f"({1000 * two:+.1f}) | {1000 * t['mixed']:.1f} ({1000 * one:+.1f}) | "
              f"{100 * (1 - one / two) if two > 0 else float('nan'):.0f}% |", flush=True)
    pieces = [int(k) for k in args.pieces.split(",") if k]
    if pieces:
        pieces_table(runner, streams, prompt, whole, pieces, args.repeats,
                     1.0 / EngineConfig().min_stream_tok_s)


if __name__ == "__main__":
    main()
