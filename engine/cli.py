"""Batch generation behind `python -m engine`, and the options it shares with the chat."""
from __future__ import annotations

import argparse
import sys

from engine import Engine, EngineConfig, SamplingParams, TandemError


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="MLX/HF folder or .gguf (default: built-in)")
    p.add_argument("--max-tokens", type=int, default=512, help="longest reply, in tokens")
    p.add_argument("--temperature", type=float, default=0.0, help="0 picks the likeliest token")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling; 1 keeps all")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")


def _sampling(args) -> SamplingParams:
    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                          top_p=args.top_p, seed=args.seed)


def _load(args, config: EngineConfig | None = None) -> Engine | None:
    """The engine, or None after telling the user what went wrong."""
    print(f"Loading {args.model or 'the built-in model'}...", file=sys.stderr)
    try:
        return Engine.load(args.model, config)
    except TandemError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def run_generate(args) -> int:
    engine = _load(args)
    if engine is None:
        return 2
    recorder, monitor = _start_trace(engine, args.trace)
    with engine:
        outs = engine.generate(args.prompt, _sampling(args))
    for i, (prompt, out) in enumerate(zip(args.prompt, outs)):
        s = out.stats
        print(f"--- [{i}] {prompt!r} ({out.finish_reason}, {s.generated_tokens} tokens, "
              f"ttft {s.ttft_s * 1000:.0f} ms, {s.decode_tok_s:.1f} tok/s)")
        print(out.text)
    if recorder is not None:
        monitor.stop()
        recorder.stop()
        recorder.save(args.trace)
        print(f"trace written to {args.trace}", file=sys.stderr)
    return 0


def _start_trace(engine: Engine, path: str | None):
    """A recorder of the engine's events and the GPU/CPU clock and power readings."""
    if not path:
        return None, None
    from engine.telemetry import TelemetryMonitor, TraceRecorder
    recorder, monitor = TraceRecorder(), TelemetryMonitor(interval_s=0.25)
    engine.add_listener(recorder.on_event)
    monitor.add_listener(recorder.on_reading)
    recorder.start()
    monitor.start()
    return recorder, monitor


def run_chat(args) -> int:
    """`python -m engine chat` (the REPL is engine/chat_repl.py)."""
    from engine.chat_repl import run_chat as repl
    return repl(args, _load(args), _sampling(args))
