"""How busy the GPU is while the engine decodes: kernel time over wall time, in its own loop.

    PYTHONPATH=. python -m engine.bench.gpu_busy [--model synthetic:qwen3.5-35b-a3b]
        [--batch 1,16] [--steps 64] [--rounds 3]

Issue 23 asks for "the GPU busy at least 80 % of the step". `engine.bench.kernel_time`
sums a step's kernels but times its own synchronous loop (forward, eval, repeat), not the
engine's, which queues step n+1 before it reads step n back. Here the engine runs as the
app and the bench drive it (`runs.ours_decode`: B rows of 32-token prompts, greedy,
through `Engine.generate`) under torch.profiler, whose CUPTI sees every kernel in the
process, MLX's inside its CUDA graphs included. Per run it reports, over the middle half
of the run's kernel timeline (steady decode: the rows' short prompts are read at its
start), the share of wall time during which at least one kernel ran (the union of their
intervals, so overlapping kernels count once), kernels a millisecond, and the run's
steady-step median from the engine's own step events. CUPTI adds host time to every
graph launch (session 44's H100: B=1 steps of 6.3-10 ms profiled against 4.3-4.7 ms
plain), so where the host sets the pace the profiled share understates the plain one.
Each profiled run is therefore paired with a plain run of the same batch and round, and
the row also gives the kernels' busy time a step (the profiled share times its step) over
the plain run's step median: `busy_plain`, the share the plain loop would have if
profiling leaves the kernels' own times alone (it does not touch the GPU's work, only the
launches). Every plain run comes before the first profiled one: once CUPTI has traced,
its callbacks stay in the process and slow every later launch (sessions 47-48's H100: a
B=1 plain run took 4.77 ms a step before any profiling and 6.31-6.47 ms after one, the
profiled steps 7.0-7.3 ms throughout), which had made rounds 2-3's busy_plain 59-63 %
against round 1's 84 %.
Needs torch (the GPU machine's image has it); elsewhere it says so and stops.
"""
from __future__ import annotations

import argparse

from engine.bench.engine_start import open_engine
from engine.bench.runs import ours_decode
from engine.bench.suite import _prompt, _vocab
from engine.config import EngineConfig
from kernels.bench.common import cuda_kernel_events

PROMPT = 32


def busy_fraction(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Share of [lo, hi] covered by the union of `intervals` (start, end), clipped to it."""
    if hi <= lo:
        return 0.0
    covered, reach = 0.0, lo
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, hi)
        if end > start:
            covered += end - start
            reach = end
    return covered / (hi - lo)


def middle_window(intervals: list[tuple[float, float]]) -> tuple[float, float]:
    """The middle half of the span the intervals cover: a decode run's steady part."""
    first = min(s for s, _ in intervals)
    last = max(e for _, e in intervals)
    quarter = (last - first) / 4
    return first + quarter, last - quarter


def kernel_intervals(prof) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every CUDA kernel torch.profiler recorded."""
    return [(e.time_range.start, e.time_range.end) for e in cuda_kernel_events(prof)]


def summary(intervals: list[tuple[float, float]]) -> dict:
    """Busy share and kernels a millisecond over the run's middle half."""
    lo, hi = middle_window(intervals)
    inside = [(s, e) for s, e in intervals if s < hi and e > lo]
    return {"busy": round(busy_fraction(inside, lo, hi), 3),
            "kernels_per_ms": round(len(inside) / ((hi - lo) / 1e3), 1),
            "window_ms": round((hi - lo) / 1e3, 1)}


def plain_share(busy: float, profiled_step_s: float, plain_step_s: float) -> dict:
    """The kernels' busy ms a step (the profiled share of the profiled step) and that over
    the plain run's step: what the share would be without the profiler (at most 1)."""
    busy_ms = busy * profiled_step_s * 1e3
    return {"busy_ms_per_step": round(busy_ms, 2),
            "busy_plain": round(min(1.0, busy_ms / (plain_step_s * 1e3)), 3)
            if plain_step_s > 0 else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.gpu_busy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="synthetic:qwen3.5-35b-a3b")
    p.add_argument("--batch", default="1,16")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("no torch here: nothing to measure the kernels with")
        return 0
    batches = [int(b) for b in args.batch.split(",") if b]
    per_row = -(-(PROMPT + args.steps + 2 * max(batches) + 16) // 16)
    cfg = EngineConfig(max_num_seqs=max(batches), page_size=16,
                       num_pages=max(batches) * per_row + 64,
                       max_context=PROMPT + args.steps + 2 * max(batches) + 32)
    engine = open_engine(args.model, cfg)
    vocab = _vocab(engine.bundle.config)
    try:
        for B in batches:                    # every shape once, untimed
            ours_decode(engine, [_prompt(PROMPT, vocab, 500 + s) for s in range(B)], 8)
        # Every plain run first: CUPTI's callbacks outlive a profiled run (docstring).
        plain = {(r, B): ours_decode(
            engine, [_prompt(PROMPT, vocab, 1000 * r + 500 + s) for s in range(B)],
            args.steps)[0] for r in range(args.rounds) for B in batches}
        for r in range(args.rounds):
            for B in batches:
                plain_s = plain[r, B]
                prompts = [_prompt(PROMPT, vocab, 1000 * r + s) for s in range(B)]
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    median_s, extra = ours_decode(engine, prompts, args.steps)
                intervals = kernel_intervals(prof)
                row = {"round": r, "B": B, "step_ms": round(median_s * 1e3, 2),
                       "plain_step_ms": round(plain_s * 1e3, 2), "steps": extra["steps"]}
                if intervals:
                    row |= summary(intervals)
                    row["kernels_per_step"] = round(row["kernels_per_ms"] * median_s * 1e3)
                    row |= plain_share(row["busy"], median_s, plain_s)
                print(row, flush=True)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
