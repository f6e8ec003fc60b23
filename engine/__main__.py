"""Terminal use: ``python -m engine chat | generate | bench`` (default: the built-in model).

``bench`` is handed to ``python -m engine.bench`` (engine/cli.py: run_bench).
"""
from __future__ import annotations

import argparse
import sys

from engine.cli import add_model_args, run_bench, run_chat, run_generate


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
    # The bench's options belong to engine.bench, which is imported only when chosen.
    sub.add_parser("bench", add_help=False,
                   help="decode and prefill speed, ours and mlx-lm's (bench -h for options)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        return run_bench(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "chat":
        return run_chat(args)
    return run_generate(args)


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    sys.exit(main())
