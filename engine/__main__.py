"""Terminal use: python -m engine chat | generate | serve | bench (default: the built-in
model). bench is handed to python -m engine.bench (engine/terminal/cli.py: run_bench).
"""
from __future__ import annotations

import argparse
import sys

from engine.distributed.launch import add_hosts_arg
from engine.distributed.launch import enter as enter_group
from engine.terminal.chat_repl import add_chat_args
from engine.terminal.cli import add_model_args, run_bench, run_chat, run_generate


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show (None, a flag
    that is off) or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        shown = action.default is not None and action.default is not False
        if not shown or action.default == argparse.SUPPRESS or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__,
                                     formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    chat = sub.add_parser("chat", help="interactive, streaming, multi-turn chat",
                          description="Chat in the terminal; /help inside lists the commands.",
                          formatter_class=HelpFormatter)
    add_model_args(chat, chat=True)
    add_chat_args(chat)
    add_hosts_arg(chat)
    gen = sub.add_parser("generate", help="all prompts in one batch; prints each completion",
                         formatter_class=HelpFormatter)
    add_model_args(gen)
    gen.add_argument("--prompt", action="append", required=True, help="repeat for a batch")
    gen.add_argument("--trace", default=None, help="write a Perfetto trace here")
    add_hosts_arg(gen)
    from engine.server.standalone import add_serve_args
    serve = sub.add_parser("serve", help="OpenAI-compatible API on localhost")
    add_serve_args(serve)
    add_hosts_arg(serve)
    # The bench's options belong to engine.bench, which is imported only when chosen.
    sub.add_parser("bench", add_help=False,
                   help="decode and prefill speed, ours and mlx-lm's (bench -h for options)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        return run_bench(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    # Several machines (--hosts, or started by mlx.launch): only rank 0 goes on.
    done = enter_group(args, sys.argv[1:] if argv is None else argv)
    if done is not None:
        return done
    if args.command == "chat":
        return run_chat(args)
    if args.command == "serve":
        from engine.server.standalone import run_serve
        return run_serve(args)
    return run_generate(args)


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    sys.exit(main())
