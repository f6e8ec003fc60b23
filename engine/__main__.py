"""Terminal use: ``python -m engine chat | generate | serve | bench`` (default: the built-in model)."""
from __future__ import annotations

import argparse
import sys

from engine.cli import add_model_args, run_chat, run_generate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    chat = sub.add_parser("chat", help="interactive, streaming, multi-turn chat")
    add_model_args(chat)
    chat.add_argument("--system", default=None, help="system prompt")
    gen = sub.add_parser("generate", help="all prompts in one batch; prints each completion")
    add_model_args(gen)
    gen.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    gen.add_argument("--trace", default=None, help="write a Perfetto trace here")
    from engine.server.standalone import add_serve_args, run_serve
    add_serve_args(sub.add_parser("serve", help="OpenAI-compatible API on localhost"))
    bench = sub.add_parser("bench", help="decode and prefill speed, ours and mlx-lm's")
    from engine.bench import add_bench_args, run_bench
    add_bench_args(bench)
    args = parser.parse_args(argv)
    if args.command == "chat":
        return run_chat(args)
    if args.command == "generate":
        return run_generate(args)
    if args.command == "serve":
        return run_serve(args)
    return run_bench(args)


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    sys.exit(main())
