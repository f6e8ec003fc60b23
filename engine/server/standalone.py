"""`python -m engine serve`: the API server over an engine of its own, until Ctrl-C.

The server listens first and answers 503 while the model loads, so a client
started alongside can poll /v1/models instead of failing to connect.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from engine.config import EngineConfig
from engine.errors import TandemError
from engine.http_origin import check_origin
from engine.server.api_server import ApiServer
from engine.server.engine_source import EngineHolder
from engine.server.server_config import (
    DEFAULT_CLIENT_TIMEOUT_S,
    DEFAULT_HOST,
    DEFAULT_PORT,
    ServerConfig,
)
from engine.terminal.cli import add_reading_pace_arg


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="MLX/HF folder or .gguf (default: built-in)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on every request")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   type=_origin,
                   help="let web pages from ORIGIN (e.g. http://localhost:3000; '*' for any) "
                        "call the API from a browser; repeatable (default: CORS off)")
    p.add_argument("--insecure", action="store_true",
                   help="allow a --host other machines can reach without an --api-key")
    p.add_argument("--client-timeout", type=float, default=DEFAULT_CLIENT_TIMEOUT_S,
                   metavar="S", help="hang up on a client that stalls this long: sending "
                   "its request, or reading a stream (its request is cancelled)")
    p.add_argument("--cache-dir", default=None,
                   help="keep finished requests' prompt cache in this folder, so a client's "
                        "next turn (also after a restart) reads only its new tokens")
    p.add_argument("--disk-cache-mb", type=int, default=EngineConfig.disk_cache_mb,
                   help="the --cache-dir folder's budget in MB (least recently used go)")
    add_reading_pace_arg(p)


def run_serve(args) -> int:
    try:
        config = ServerConfig(host=args.host, port=args.port, api_key=args.api_key,
                              client_timeout_s=args.client_timeout,
                              cors_origins=tuple(args.cors_origin))
        engine_config = EngineConfig(cache_dir=args.cache_dir, disk_cache_mb=args.disk_cache_mb,
                                     min_stream_tok_s=args.reading_pace)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    refusal = config.exposure_refusal(args.insecure)
    if refusal:
        print(config.exposure_warning(), file=sys.stderr)
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(args.model, config, engine_config=engine_config))
    except KeyboardInterrupt:
        return 0


async def serve(model: str | None, config: ServerConfig,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None,
                engine_config: EngineConfig | None = None) -> int:
    """Listen, load `model`, serve until `stop` is set (or the task is cancelled)."""
    holder = EngineHolder()
    server = ApiServer(holder, config)
    try:
        url = await server.start()
    except TandemError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Tandem API listening on {url}; loading {model or 'the built-in model'}...",
          file=sys.stderr)
    try:
        holder.engine = await asyncio.get_running_loop().run_in_executor(
            None, _load_engine, model, engine_config)
    except TandemError as e:
        print(f"error: {e}", file=sys.stderr)
        await server.stop()
        return 2
    finally:
        holder.loading = False
    print(f"Serving {holder.engine.model_name} at {url} (Ctrl-C to stop)", file=sys.stderr)
    stop = stop or asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):   # not on Windows' loop
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        await server.stop()
        holder.engine.close()
    return 0


def _load_engine(model: str | None, engine_config: EngineConfig | None):
    from engine.core.engine import Engine
    return Engine.load(model, engine_config)


def _origin(value: str) -> str:
    try:
        return check_origin(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
