"""Batch generation behind `python -m engine`, and the options it shares with the chat."""
from __future__ import annotations

import argparse
import sys

from engine import Engine, EngineConfig, SamplingParams, TandemError
from engine.terminal.sampling_args import add_sampling_arguments, sampling_params_from_args


def add_model_args(p: argparse.ArgumentParser, chat: bool = False) -> None:
    """The model, cache, pace and sampling options (chat: the app's sampling defaults)."""
    p.add_argument("--model", default=None, help="MLX/HF folder or .gguf (default: built-in)")
    p.add_argument("--cache-dir", default=None,
                   help="keep finished turns' prompt cache in this folder, so a conversation "
                        "resumes after a restart without re-reading its history")
    p.add_argument("--disk-cache-mb", type=int, default=EngineConfig.disk_cache_mb,
                   help="the --cache-dir folder's budget in MB (least recently used go)")
    add_reading_pace_arg(p)
    add_sampling_arguments(p, chat)


def add_reading_pace_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reading-pace", type=float, default=EngineConfig.min_stream_tok_s,
                   metavar="TOK_S",
                   help="while a new prompt is read, keep every other stream at least this "
                        "many tokens/s (0: read new prompts as fast as possible)")


def engine_config(args) -> EngineConfig:
    """The engine limits the command line sets."""
    return EngineConfig(cache_dir=args.cache_dir, disk_cache_mb=args.disk_cache_mb,
                        min_stream_tok_s=args.reading_pace)


def _load(args, config: EngineConfig | None = None) -> Engine | None:
    """The engine, or None after telling the user what went wrong."""
    print(f"Loading {args.model or 'the built-in model'}...", file=sys.stderr)
    try:
        engine = Engine.load(args.model, config or engine_config(args))
    except (TandemError, ValueError) as e:     # ValueError: a bad --disk-cache-mb
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
    params = _params(args)
    engine = _load(args) if params else None
    if engine is None:
        return 2
    recording = _start_trace(engine, args.trace)
    with engine:
        outs = engine.generate(args.prompt, params)
    for i, (prompt, out) in enumerate(zip(args.prompt, outs)):
        s = out.stats
        print(f"--- [{i}] {prompt!r} ({out.finish_reason}, {s.generated_tokens} tokens, "
              f"ttft {s.ttft_s * 1000:.0f} ms, {s.decode_tok_s:.1f} tok/s)")
        print(out.text)
    if recording is not None:
        print(f"trace written to {recording.finish()}", file=sys.stderr)
    return 0


def _params(args) -> SamplingParams | None:
    """The sampling settings, or None after saying which is wrong (e.g. an empty --stop)."""
    try:
        return sampling_params_from_args(args)
    except (TypeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _start_trace(engine: Engine, path: str | None):
    """Events plus GPU/CPU clock and power readings, streamed to `path`."""
    if not path:
        return None
    from engine.telemetry.recording import record_engine
    try:
        return record_engine(engine, path)
    except OSError as e:
        print(f"error: cannot write the trace to {path}: {e}; going on without it",
              file=sys.stderr)
        return None


def run_chat(args) -> int:
    """`python -m engine chat` (the REPL is engine/terminal/chat_repl.py)."""
    from engine.terminal.chat_repl import run_chat as repl
    params = _params(args)
    return repl(args, _load(args) if params else None, params)


def run_bench(argv: list[str]) -> int:
    """``python -m engine bench ...``: the short form of ``python -m engine.bench ...``.

    The bench is a tool, not the product: this is the only place the product names it,
    and it is imported only when the bench subcommand was chosen.
    """
    try:
        from engine.bench.__main__ import main
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("engine.bench"):
            raise
        print("error: the benchmarks are not part of this install; run them from a source "
              "checkout (pip install -e '.[bench]').", file=sys.stderr)
        return 2
    return main(argv, prog="python -m engine bench")
