"""``python -m engine.bench`` (short: ``python -m engine bench``): our engine against mlx-lm on the same weights, in one run.

Decode tok/s and per-token step time at each batch size, prefill tok/s at each
prompt length, alternating ours / mlx-lm, medians over rounds; each run with
its index (0 = cold), the rest before it, and the GPU MHz and W while it ran. A decode
run's median and slowest step are over its steady steps only (runs.steady_decode: not
the first step of all rows, which holds the prompts' reading).
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time

import mlx.core as mx

from engine.bench.engine_start import open_engine
from engine.bench.host_info import host_line
from engine.bench.runs import (
    RunLog,
    add_moe_max_pairs_arg,
    apply_moe_max_pairs,
    mixed_forward_arg,
    ours_decode,
    ours_prefill,
    ours_ttft_under_load,
)
from engine.bench.stack_sampler import StackSampler
from engine.config import EngineConfig
from engine.core.compiled_forward import runs_mixed_forwards
from engine.cuda_graphs import graph_limit_setting
from engine.settings_spec import chat_defaults

WARM_PREFILL_MAX = 4096     # the bench's warm-up reads prompts up to this long


def add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="model path, or synthetic:qwen3.5-35b-a3b (random full-size weights)")
    p.add_argument("--batch", default="1,2,4,8,16", help="decode batch sizes")
    p.add_argument("--prefill", default="128,512", help="prefill prompt lengths")
    p.add_argument("--steps", type=int, default=16, help="decode steps per run")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    p.add_argument("--prefill-chunk", type=int, default=2048)
    p.add_argument("--no-peer", action="store_true", help="skip mlx-lm")
    p.add_argument("--peer-only", action="store_true",
                   help="time mlx-lm alone: its model is built from ours, then our engine "
                        "closes (pair with a --no-peer run: each engine in a process that "
                        "holds only its own model)")
    p.add_argument("--peer-max-prefill", type=int, default=1 << 30,
                   help="skip mlx-lm's prefill above this many tokens (it is slow)")
    p.add_argument("--ttft-load", type=int, default=0,
                   help="also: TTFT of a prompt this long while 7 others stream")
    p.add_argument("--no-mixed-forward", action="store_true",
                   help="run decode rows and a prompt chunk as two forwards, not one "
                        "(EngineConfig.mixed_forward=False: the A/B of --ttft-load)")
    p.add_argument("--mixed-forward", action="store_true",
                   help="EngineConfig.mixed_forward=True (default: the engine's choice)")
    p.add_argument("--sustained", type=int, default=0,
                   help="repeat the longest prefill N times without rest (clock check)")
    p.add_argument("--trace-overhead", type=int, default=0, metavar="B",
                   help="also: decode at batch B with and without a trace recording, "
                        "alternating (the recorder's cost on tok/s)")
    p.add_argument("--json", default=None, help="write every run here")
    p.add_argument("--steps-log", default=None, metavar="PATH",
                   help="write every Tandem decode run's steady steps here (a JSON line a "
                        "run: each step's start by the wall clock, UTC, its ms, queue, queue "
                        "CPU and read ms, and the telemetry samples within it)")
    p.add_argument("--stacks", type=float, default=0.0, metavar="MS",
                   help="sample the engine thread's Python stack every MS ms, and print "
                        "what it ran within each decode run's slowest step (and, with "
                        "--steps-log, within every step over 2x its run's median): "
                        "engine/bench/stack_sampler.py; default 0, off")
    p.add_argument("--trace", default=None, help="write a Perfetto trace here")
    p.add_argument("--telemetry-interval", type=float, default=0.25, metavar="S",
                   help="seconds between the clock/power samples read beside every run "
                        "(default 0.25; 0: none, to see whether sampling slows a step)")
    p.add_argument("--sampling", choices=("greedy", "app"), default="greedy",
                   help="decode runs' sampling, both engines: greedy, or the app's chat "
                        "defaults (temperature 0.7, top-p 0.95: engine/settings_spec.py)")
    p.add_argument("--clear-cache", action="store_true",
                   help="empty MLX's buffer cache before each run (both engines), so that "
                        "no run inherits the other engine's cached buffers")
    p.add_argument("--mlx-cache-limit", type=int, default=None, metavar="BYTES",
                   help="mx.set_cache_limit for the whole run (0: no buffer cache). A "
                        "diagnostic: MLX 0.32's CUDA cache holds device and host buffers "
                        "alike, and a host array (a step's index upload) handed a device "
                        "one is moved with a blocking cudaMemcpy (engine/core/host_arrays.py)")
    add_moe_max_pairs_arg(p)    # B=32 decode is 256 pairs: the sorted path's +560 launches


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, vocab - 1) for _ in range(n)]


def _vocab(config: dict) -> int:
    return config.get("vocab_size") or config.get("text_config", {}).get("vocab_size", 32000)


def run_bench(args) -> int:
    apply_moe_max_pairs(args)
    batches = [int(b) for b in args.batch.split(",") if b]
    lengths = [int(n) for n in args.prefill.split(",") if n]
    max_b = max(batches + [8])
    # A decode run's rows: 32-token prompts, then steps + 2B + 4 tokens (ours_decode).
    longest = max(lengths + [args.ttft_load, 64 + 2 * max_b]) + args.steps + 16
    # Pages for every decode run (all rows at once) plus the longest prompt, no more.
    per_row = -(-(64 + 4 * args.steps + 2 * max_b + 16) // 16)
    cfg = EngineConfig(max_num_seqs=max_b, page_size=16,
                       num_pages=max_b * per_row + -(-longest // 16) + 64,
                       prefill_chunk=args.prefill_chunk, max_context=longest + 16,
                       mixed_forward=mixed_forward_arg(args))
    if args.mlx_cache_limit is not None:
        mx.set_cache_limit(args.mlx_cache_limit)
    engine = open_engine(args.model, cfg)
    monitor, recording = _telemetry(engine, args.trace, args.telemetry_interval)
    stacks = StackSampler(interval_s=args.stacks / 1e3).__enter__() if args.stacks > 0 else None
    log = RunLog(monitor, clear_cache=args.clear_cache, steps_log=args.steps_log, stacks=stacks)
    vocab = _vocab(engine.bundle.config)
    sampling = decode_sampling(args.sampling)
    peer = None if args.no_peer else _make_peer(engine, sampling)
    model_name = engine.model_name
    processes = "one process" if peer and not args.peer_only else "this engine alone"
    if args.peer_only:
        _check_peer_only(peer, args)
        engine.close()
        engine = None      # before the count below: this frame's reference holds the model
        _print_held_after_close()
    print(host_line(), flush=True)
    print(f"# model: {model_name}; device: {mx.default_device()}; "
          f"sampler: {monitor.sampler.source if monitor else 'none'}; "
          f"mixed forward: {'on' if runs_mixed_forwards(cfg) else 'off'}; "
          f"decode sampling: {sampling or 'greedy'}; {graph_limit_setting()} ({processes}: "
          "engine/cuda_graphs.py)" + (f"; MLX buffer cache limit {args.mlx_cache_limit} bytes"
                                      if args.mlx_cache_limit is not None else ""), flush=True)
    _warm_up(engine, peer, vocab, batches, lengths, args, sampling)
    for _ in range(args.rounds):
        for B in batches:
            prompts = [_prompt(32, vocab, s) for s in range(B)]
            if engine:
                log.timed(lambda: ours_decode(engine, prompts, args.steps, sampling),
                          engine="tandem", what="decode", size=B)
            if peer:
                log.timed(lambda: peer.decode_run(prompts, args.steps),
                          engine="mlx-lm", what="decode", size=B)
        for n in lengths:
            prompt = _prompt(n, vocab, n)
            if engine:
                log.timed(lambda: ours_prefill(engine, prompt), engine="tandem",
                          what="prefill", size=n)
            if peer and n <= args.peer_max_prefill:
                log.timed(lambda: (peer.prefill_seconds(prompt), {}), engine="mlx-lm",
                          what="prefill", size=n)
    streams = [_prompt(64, vocab, 100 + i) for i in range(7)]
    for r in range(args.rounds if args.ttft_load else 0):
        # A fresh prompt each time (a repeated one would come from the prefix cache),
        # read alone and then while the 7 stream, alternating.
        prompt = _prompt(args.ttft_load, vocab, 7 + r)
        log.timed(lambda: ours_prefill(engine, prompt), engine="tandem",
                  what="ttft_alone", size=args.ttft_load)
        prompt = _prompt(args.ttft_load, vocab, 1007 + r)
        log.timed(lambda: ours_ttft_under_load(engine, streams, prompt),
                  engine="tandem", what="ttft_under_load", size=args.ttft_load)
    if args.trace_overhead:
        _trace_overhead(engine, log, args, vocab)
    for _ in range(args.sustained):
        n = max(lengths)
        log.timed(lambda: ours_prefill(engine, _prompt(n, vocab, n)), engine="tandem",
                  what="sustained_prefill", size=n)
    _report(log, batches, lengths, peak_gb=max((r.peak_gb or 0.0 for r in log.runs), default=0.0))
    _finish(engine, monitor, recording, args, log)
    return 0


def _trace_overhead(engine, log, args, vocab) -> None:
    """Decode with and without a recording, alternating; prints the median ratio."""
    from engine.telemetry.recording import TraceRecording
    B = args.trace_overhead
    prompts = [_prompt(32, vocab, s) for s in range(B)]
    for _ in range(args.rounds):
        log.timed(lambda: ours_decode(engine, prompts, args.steps), engine="tandem",
                  what="decode_untraced", size=B)
        rec = TraceRecording(engine.add_listener, remove_event_listener=engine.remove_listener)
        rec.start()
        log.timed(lambda: ours_decode(engine, prompts, args.steps), engine="tandem",
                  what="decode_traced", size=B)
        rec.finish()
    off = _median_run(log, "tandem", "decode_untraced", B)
    on = _median_run(log, "tandem", "decode_traced", B)
    print(f"trace recording: decode step {1000 * on:.2f} ms traced vs {1000 * off:.2f} ms "
          f"untraced at B={B}: {100 * (on / off - 1):+.1f}% (median of {args.rounds})")


def _check_peer_only(peer, args) -> None:
    """--peer-only: our engine closes once mlx-lm's model is built from its weights (the
    arrays the peer shares stay), so mlx-lm runs with only its own model and cache."""
    if peer is None or args.ttft_load or args.trace or args.trace_overhead or args.sustained:
        raise SystemExit("error: --peer-only needs mlx-lm, and takes none of --ttft-load, "
                         "--trace, --trace-overhead, --sustained (ours only)")


def _print_held_after_close() -> None:
    gc.collect()
    mx.clear_cache()
    print(f"# --peer-only: our engine closed; {mx.get_active_memory() / 1e9:.2f} GB still "
          "held (mlx-lm's model)", flush=True)


def _warm_up(engine, peer, vocab, batches, lengths, args, sampling=None) -> None:
    """First calls of a shape compile kernels (minutes on a cold CUDA cache, for mlx-lm
    as for us): one untimed run of every shape the timed rounds meet, both engines,
    so no round's median holds a compile. Prompts up to WARM_PREFILL_MAX tokens: longer
    ones run as chunks of shapes met already."""
    t0 = time.perf_counter()
    for B in batches:
        prompts = [_prompt(32, vocab, 500 + s) for s in range(B)]
        if engine:
            ours_decode(engine, prompts, 4, sampling)
        if peer:
            peer.decode_run(prompts, 4)
    for n in lengths:
        prompt = _prompt(min(n, WARM_PREFILL_MAX), vocab, 900 + n)
        if engine:
            ours_prefill(engine, prompt)
        if peer and n <= args.peer_max_prefill:
            peer.prefill_seconds(prompt)
    if args.ttft_load:
        streams = [_prompt(64, vocab, 300 + i) for i in range(7)]
        ours_ttft_under_load(engine, streams, _prompt(args.ttft_load, vocab, 5000))
    print(f"# warm-up (every shape once, untimed): {time.perf_counter() - t0:.1f} s",
          flush=True)


def decode_sampling(name: str) -> dict | None:
    """SamplingParams fields of a decode run: None (greedy), or the app's chat defaults."""
    if name == "greedy":
        return None
    defaults = chat_defaults()
    return {"temperature": defaults["temperature"], "top_p": defaults["top_p"]}


def _make_peer(engine, sampling=None):
    try:
        from engine.bench.peer import Peer, peer_model
    except ImportError:
        print("# mlx-lm not installed: pip install -e '.[bench]'", file=sys.stderr)
        return None
    return Peer(peer_model(engine.bundle.model, engine.bundle.config), sampling)


def _telemetry(engine, trace_path, interval_s: float = 0.25):
    """A monitor for every run's clock and power (none at interval 0: a trace then
    samples on its own); a trace recording when asked for."""
    from engine.telemetry import TelemetryMonitor
    from engine.telemetry.recording import record_engine
    monitor = TelemetryMonitor(interval_s=interval_s) if interval_s > 0 else None
    if monitor is not None:
        monitor.start()
    recording = record_engine(engine, trace_path, monitor=monitor) if trace_path else None
    return monitor, recording


def _median_run(log, engine, what, size):
    rs = [r for r in log.runs if r.engine == engine and r.what == what and r.size == size]
    return statistics.median(r.seconds for r in rs) if rs else None


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def _report(log: RunLog, batches, lengths, peak_gb: float) -> None:
    print("\n## decode (median per-step seconds over rounds)")
    print("| B | tandem tok/s | tandem ms/token | mlx-lm tok/s | mlx-lm ms/token | ratio |")
    print("|---|---|---|---|---|---|")
    for B in batches:
        a, b = _median_run(log, "tandem", "decode", B), _median_run(log, "mlx-lm", "decode", B)
        print(f"| {B} | {_fmt(a and B / a)} | {_fmt(a and 1000 * a / B, '.2f')} | "
              f"{_fmt(b and B / b)} | {_fmt(b and 1000 * b / B, '.2f')} | "
              f"{_fmt(a and b and b / a, '.2f')}x |")
    print("\n## prefill (median seconds to first token)")
    print("| tokens | tandem tok/s | mlx-lm tok/s | ratio |")
    print("|---|---|---|---|")
    for n in lengths:
        a, b = _median_run(log, "tandem", "prefill", n), _median_run(log, "mlx-lm", "prefill", n)
        print(f"| {n} | {_fmt(a and n / a)} | {_fmt(b and n / b)} | "
              f"{_fmt(a and b and b / a, '.2f')}x |")
    _report_ttft_load(log)
    print("\n## every run (index 0 = cold)")
    print("| # | engine | what | size | seconds (median step) | slowest step s | slowest/median "
          "| tok/s | peak GB | rest s | GPU MHz | GPU W | extra |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in log.runs:
        ratio = r.slowest_s / r.seconds if r.slowest_s and r.seconds else None
        print(f"| {r.index} | {r.engine} | {r.what} | {r.size} | {r.seconds:.4f} | "
              f"{_fmt(r.slowest_s, '.4f')} | {_fmt(ratio, '.2f')} | {r.tok_s:.1f} | "
              f"{_fmt(r.peak_gb, '.2f')} | {r.rest_s:.2f} | {_fmt(r.mhz, '.0f')} | "
              f"{_fmt(r.watts)} | {json.dumps(r.extra) if r.extra else ''} |")
    print(f"\npeak memory, highest run: {peak_gb:.2f} GB "
          "(per run above: reset before each run)")


def _report_ttft_load(log: RunLog) -> None:
    """TTFT with 7 streams against alone (medians over rounds), where it ran."""
    sizes = sorted({r.size for r in log.runs if r.what == "ttft_under_load"})
    for n in sizes:
        alone = _median_run(log, "tandem", "ttft_alone", n)
        loaded = _median_run(log, "tandem", "ttft_under_load", n)
        print(f"\n## TTFT of a {n}-token prompt: {alone:.3f} s alone, {loaded:.3f} s with 7 "
              f"streams ({loaded / alone:.2f}x; medians)")


def _finish(engine, monitor, recording, args, log) -> None:
    if recording is not None:
        recording.finish()
    if monitor is not None:
        monitor.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ | {"tok_s": r.tok_s} for r in log.runs], f, indent=1)
    if engine:
        engine.close()
