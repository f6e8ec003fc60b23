"""Host time to queue one step, plain forwards against compiled ones (no evaluation).

    PYTHONPATH=. python -m engine.bench.step_host_time [--model synthetic:NAME]
        [--layers 4] [--decode 7] [--chunks 16,64] [--repeats 15]

A plain (uncompiled) forward builds its whole graph in Python every step; a compiled
one (engine/core/compiled_forward.py) replays a recorded graph from C++. On a GPU the
device runs a decode step in a few ms, so what the host spends queuing a step can be
most of it: this prints, per chunk length, the median milliseconds Runner.decode,
Runner.prefill and Runner.mixed take to return their lazy logits, for plain forwards
and with compile_decode + compile_chunks. The weights are never read (nothing is
evaluated), so a slice of the full-size shape (--layers) runs on any machine; the host
time scales with the layers. Timing only: nothing here belongs in a test.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

from engine.bench.mixed_step import stream_rows
from engine.bench.synthetic import SYNTHETIC, synthetic_model_from_config
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk

PAGES_PER_ROW = 40


def _median_ms(fn, repeats: int) -> float:
    fn()                          # traces a compiled layout: untimed
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.step_host_time",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="synthetic:qwen3.5-35b-a3b")
    p.add_argument("--layers", type=int, default=4, help="only the first N layers")
    p.add_argument("--decode", type=int, default=7, help="decode rows")
    p.add_argument("--chunks", default="16,64", help="prompt chunk lengths")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    config = copy.deepcopy(SYNTHETIC[args.model.removeprefix("synthetic:")])
    (config.get("text_config") or config)["num_hidden_layers"] = args.layers
    model = synthetic_model_from_config(config)
    streams, prompt = stream_rows(args.decode, PAGES_PER_ROW)
    chunks = [int(c) for c in args.chunks.split(",") if c]
    print(f"# {args.model}, first {args.layers} layers, {args.decode} decode rows; host ms "
          f"to queue a step (no evaluation), medians of {args.repeats}")
    print("| chunk | forwards | decode | prefill | mixed |")
    print("|---|---|---|---|---|")
    for compiled in (False, True):
        runner = Runner(model, EngineConfig(
            max_num_seqs=args.decode + 1, page_size=16, prefix_cache=False,
            num_pages=(args.decode + 1) * PAGES_PER_ROW + 1, prefill_chunk=max(chunks),
            max_context=PAGES_PER_ROW * 16, fixed_shapes=True, compile_decode=compiled,
            compile_chunks=compiled))
        for n in chunks:
            chunk = [PrefillChunk(prompt, 0, n)]
            ms = [_median_ms(fn, args.repeats) for fn in (
                lambda: runner.decode(streams), lambda: runner.prefill(chunk),
                lambda: runner.mixed(streams, chunk))]
            print(f"| {n} | {'compiled' if compiled else 'plain'} | {ms[0]:.2f} | {ms[1]:.2f} "
                  f"| {ms[2]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
