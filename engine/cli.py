"""The terminal chat and batch generation behind ``python -m engine``."""
from __future__ import annotations

import argparse
import sys

from engine import Engine, EngineConfig, SamplingParams, TandemError
from engine.events import FinishedEvent


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="MLX/HF folder or .gguf (default: built-in)")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)


def _sampling(args) -> SamplingParams:
    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                          top_p=args.top_p, seed=args.seed)


def _load(args, config: EngineConfig | None = None) -> Engine | None:
    """The engine, or None after telling the user what went wrong."""
    print(f"Loading {args.model or 'the built-in model'}...", file=sys.stderr)
    try:
        engine = Engine.load(args.model, config)
    except TandemError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    print(describe_cpu(engine.blas_status, engine.weights_status), file=sys.stderr)
    return engine


def describe_cpu(blas: dict, weights: dict) -> str:
    """'weights: dense (CPU backend, …); BLAS: Intel MKL 2026.2 (/…/libmkl_rt.so.3)'."""
    why = blas.get("reason") or blas.get("path") or ""
    return (f"weights: {weights.get('mode', '?')} ({weights.get('reason', '')}); "
            f"BLAS: {blas.get('name', '?')}" + (f" ({why})" if why else ""))


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
    engine = _load(args)
    if engine is None:
        return 2
    messages = [{"role": "system", "content": args.system}] if args.system else []
    print(f"Chatting with {engine.model_name}. Empty line or Ctrl-D to quit.")
    with engine:
        while True:
            try:
                text = input("\n> ").strip()
            except (EOFError, KeyboardInterrupt):
                break
            if not text:
                break
            messages.append({"role": "user", "content": text})
            reply = _stream_reply(engine, messages, _sampling(args))
            messages.append({"role": "assistant", "content": reply})
    return 0


def _stream_reply(engine: Engine, messages: list[dict], sampling: SamplingParams) -> str:
    handle = engine.submit(list(messages), sampling)
    try:
        for ev in handle:
            if isinstance(ev, FinishedEvent):
                s = ev.stats
                print(f"\n  [{s.generated_tokens} tokens, {s.decode_tok_s:.1f} tok/s, "
                      f"ttft {s.ttft_s * 1000:.0f} ms]", file=sys.stderr)
                return ev.text
            print(ev.text, end="", flush=True)
    except KeyboardInterrupt:
        handle.cancel()
        return handle.result().text
    return ""
