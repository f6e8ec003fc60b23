"""One model on 1, 2 and 4 local ranks: decode tok/s (B=1, B=8), prefill tok/s, and the
bytes each rank sends per step (the step's plan and the blocks' collectives).

    python -m engine.bench.distributed --ranks 1,2,4 --model synthetic:qwen3.5-toy-tp

Each rank count is a fresh set of processes on MLX's ring backend over localhost
(engine/distributed/local.py); rank 0 runs the engine and measures, the others
follow. On one CPU the ranks share its cores and talk over loopback TCP, so the
numbers show the overhead of splitting, not a speed-up; on several GPUs or Macs
they show the scaling. Every rank builds the whole random model and keeps its
shard (a benchmark's shortcut; a folder is read shard by shard).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

DECODE_BATCHES = (1, 8)
PROMPT_TOKENS = 16


def toy_tp_config() -> dict:
    """Qwen3.5's architecture at toy size, with heads and widths that split in 4 and
    keep whole 4-bit groups of 64 (synthetic.py's toy splits in 2 only)."""
    from engine.bench.synthetic import QWEN3_5_TOY
    text = {**QWEN3_5_TOY["text_config"], "hidden_size": 256, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "linear_num_key_heads": 4,
            "linear_num_value_heads": 8, "linear_key_head_dim": 32,
            "linear_value_head_dim": 32, "moe_intermediate_size": 128,
            "shared_expert_intermediate_size": 256, "vocab_size": 4096}
    return {"model_type": "qwen3_5_moe", "text_config": text}


def _model(name: str):
    from engine.bench.synthetic import IdTokenizer, synthetic_in_memory, synthetic_model_from_config
    from engine.loading.model_bundle import InMemoryModel
    name = name.removeprefix("synthetic:")
    if name == "qwen3.5-toy-tp":
        config = toy_tp_config()
        return InMemoryModel(synthetic_model_from_config(config), IdTokenizer(), config,
                             "qwen3.5-toy-tp (random weights)")
    return synthetic_in_memory(name)


def _engine_config(args):
    from engine.config import EngineConfig
    return EngineConfig(max_num_seqs=8, prefill_chunk=args.prefill, min_stream_tok_s=0.0,
                        kv_budget_mb=256, prefix_cache=False, warm_up=False)


def worker(args) -> int:
    """One rank's life: follow, or (rank 0) measure and write the JSON."""
    from engine.distributed import cluster as dist
    model, config = _model(args.model), _engine_config(args)
    group = dist.connect()
    if group is not None and group.rank != 0:
        return dist.run_follower(model, config, group)
    dist.join(group)
    from engine.core.engine import Engine
    with Engine.from_model(model, config) as engine:
        result = measure(engine, args, 1 if group is None else group.size)
    Path(args.out).write_text(json.dumps(result))
    return 0


def measure(engine, args, ranks: int) -> dict:
    from engine.distributed.traffic import TRAFFIC
    from engine.sampling_params import SamplingParams
    steps = []

    def on_event(ev):
        if type(ev).__name__ == "StepEvent":
            steps.append((ev, TRAFFIC.plan, TRAFFIC.activations))
    engine.add_listener(on_event)
    greedy = SamplingParams(max_tokens=args.tokens, temperature=0.0)
    engine.generate([list(range(1, PROMPT_TOKENS + 1))], greedy)       # warm
    out = {"ranks": ranks}
    for batch in DECODE_BATCHES:
        steps.clear()
        prompts = [[(7 * i + j) % 1000 + 1 for j in range(PROMPT_TOKENS)]
                   for i in range(batch)]
        engine.generate(prompts, greedy)
        out[f"decode_b{batch}"] = _decode(steps, batch)
    steps.clear()
    engine.generate([[(3 * j) % 1000 + 1 for j in range(args.prefill)]],
                    SamplingParams(max_tokens=1, temperature=0.0))
    prefill = [s for s in steps if s[0].kind == "prefill"]
    seconds = sum(ev.t_end - ev.t_start for ev, *_ in prefill)
    out["prefill_tok_s"] = sum(ev.prefill_tokens for ev, *_ in prefill) / seconds
    return out


def _decode(steps: list, batch: int) -> dict:
    """Median over the decode steps of `batch` rows: tok/s and bytes sent per step
    (the counters' growth from the step before: one step's graph built between)."""
    rows = [(ev, plan, act, steps[i - 1][1], steps[i - 1][2]) for i, (ev, plan, act)
            in enumerate(steps) if i and ev.kind == "decode" and ev.batch_size == batch]
    step_s = statistics.median(ev.t_end - ev.t_start for ev, *_ in rows)
    return {"tok_s": batch / step_s, "step_ms": 1000 * step_s, "steps": len(rows),
            "plan_bytes": statistics.median(p - p0 for _, p, _, p0, _ in rows),
            "activation_bytes": statistics.median(a - a0 for _, _, a, _, a0 in rows)}


def run(args) -> dict[int, dict]:
    """Rounds of every rank count in turn (A/B/C, A/B/C, ...); the median of each
    number over the rounds, per rank count."""
    from engine.distributed.local import run_local
    rounds: dict[int, list[dict]] = {n: [] for n in args.ranks}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for n in args.ranks:
                out = Path(tmp) / f"r{n}-{i}.json"
                command = [sys.executable, "-m", "engine.bench.distributed", "--worker",
                           "--out", str(out), "--model", args.model,
                           "--tokens", str(args.tokens), "--prefill", str(args.prefill)]
                threads = str(max(1, (os.cpu_count() or 1) // n))   # no oversubscription
                run = run_local(n, command, Path(tmp) / f"r{n}-{i}", args.timeout,
                                env={"MKL_NUM_THREADS": threads, "OMP_NUM_THREADS": threads})
                if run.codes[0] != 0 or not out.exists():
                    raise SystemExit(f"{n} ranks failed:\n{run.output(0)[-3000:]}")
                rounds[n].append(json.loads(out.read_text()))
                print(f"round {i + 1}: " + _line(rounds[n][-1]), flush=True)
    medians = {n: _median(rs) for n, rs in rounds.items()}
    print(f"medians of {args.rounds} rounds (load average {os.getloadavg()[0]:.1f}):")
    for r in medians.values():
        print("  " + _line(r))
    return medians


def _median(results: list[dict]):
    first = results[0]
    if isinstance(first, dict):
        return {k: _median([r[k] for r in results]) for k in first}
    return statistics.median(results)


def _line(r: dict) -> str:
    d1, d8 = r["decode_b1"], r["decode_b8"]
    return (f"ranks={r['ranks']}  decode B=1 {d1['tok_s']:7.1f} tok/s ({d1['step_ms']:.1f} ms)"
            f"  B=8 {d8['tok_s']:7.1f} tok/s ({d8['step_ms']:.1f} ms)"
            f"  prefill {r['prefill_tok_s']:7.1f} tok/s"
            f"  sent/step B=1: plan {d1['plan_bytes']:.0f} B + blocks "
            f"{d1['activation_bytes']:.0f} B; B=8: plan {d8['plan_bytes']:.0f} B + blocks "
            f"{d8['activation_bytes']:.0f} B")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.distributed",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    p.add_argument("--model", default="synthetic:qwen3.5-toy-tp",
                   help="synthetic:qwen3.5-toy-tp (default) or another synthetic:NAME")
    p.add_argument("--tokens", type=int, default=32, help="tokens decoded per request")
    p.add_argument("--prefill", type=int, default=256, help="prompt tokens of the prefill run")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    p.add_argument("--timeout", type=float, default=600.0, help="per launch, seconds")
    p.add_argument("--json", default=None, help="also write every result here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    results = run(args)
    if args.json:     # {ranks: medians}
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    sys.exit(main())
