"""Aggregate decode speed of N concurrent API streams vs one, through the HTTP server.

    python -m engine.bench.server_load [--model PATH] [--streams 1 8] [--max-tokens 128]
                                       [--rounds 3]
    python -m engine.bench.server_load --url http://127.0.0.1:8000/v1   # a running server
    python -m engine.bench.server_load --direct     # same requests through Engine.submit

Without --url it starts `python -m engine serve` in a child process (so the client's
Python does not share the engine's GIL), waits for the model, measures, and stops it.
Each level sends N streaming chat requests at once and reports completion tokens (from
each stream's usage) over the wall time from the first request to the last [DONE].
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import aiohttp

TOPICS = ["a lighthouse keeper", "a lost robot", "a city under the sea", "a dragon who bakes",
          "the first day on Mars", "a clockmaker's apprentice", "a talking cat", "a winter fair"]


def _messages(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}]


async def one_stream(session: aiohttp.ClientSession, url: str, i: int, max_tokens: int,
                     headers: dict) -> int:
    body = {"messages": _messages(i), "max_tokens": max_tokens, "temperature": 0.7, "seed": i,
            "stream": True, "stream_options": {"include_usage": True}}
    tokens = 0
    async with session.post(url + "/chat/completions", json=body, headers=headers) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            line = line.strip()
            if line.startswith(b"data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = usage["completion_tokens"]
    return tokens


async def level(url: str, n: int, max_tokens: int, headers: dict) -> dict:
    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        t0 = time.perf_counter()
        tokens = await asyncio.gather(*(one_stream(session, url, i, max_tokens, headers)
                                        for i in range(n)))
        wall = time.perf_counter() - t0
    return {"streams": n, "tokens": sum(tokens), "wall_s": wall,
            "aggregate_tok_s": sum(tokens) / wall, "per_stream_tok_s": sum(tokens) / wall / n}


class DirectTarget:
    """The same requests without HTTP: Engine.submit in this process (the baseline)."""

    def __init__(self, model: str | None):
        from engine.core.engine import Engine
        self.engine = Engine.load(model)

    async def level(self, n: int, max_tokens: int) -> dict:
        from engine.sampling_params import SamplingParams
        t0 = time.perf_counter()
        handles = [self.engine.submit(_messages(i), SamplingParams(
            max_tokens=max_tokens, temperature=0.7, seed=i)) for i in range(n)]
        tokens = 0
        for h in handles:
            async for _ in h:
                pass
            tokens += h.finished.stats.generated_tokens
        wall = time.perf_counter() - t0
        return {"streams": n, "tokens": tokens, "wall_s": wall,
                "aggregate_tok_s": tokens / wall, "per_stream_tok_s": tokens / wall / n}


async def wait_ready(url: str, headers: dict, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "/models", headers=headers) as r:
                    if r.status == 200:
                        return (await r.json())["data"][0]["id"]
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"{url} did not become ready in {timeout:.0f} s")


async def run(url: str | DirectTarget, streams: list[int], max_tokens: int,
              api_key: str | None, rounds: int) -> list:
    """Levels interleaved round by round (the CPU is shared: load drifts); medians."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if isinstance(url, DirectTarget):
        target = url.level
    else:
        print(f"model {await wait_ready(url, headers)} at {url}", file=sys.stderr)

        async def target(n, max_tokens):
            return await level(url, n, max_tokens, headers)
    await target(1, 8)                                  # warm-up: compile, caches
    runs: dict[int, list[dict]] = {n: [] for n in streams}
    for i in range(rounds):
        for n in streams:
            r = await target(n, max_tokens)
            print(f"round {i + 1}: {n} streams: {r['tokens']} tokens in {r['wall_s']:.1f} s"
                  f" = {r['aggregate_tok_s']:.2f} tok/s aggregate, "
                  f"{r['per_stream_tok_s']:.2f} tok/s per stream", file=sys.stderr)
            runs[n].append(r)
    results = [_median(runs[n]) for n in streams]
    for r in results:
        print(f"{r['streams']} streams: {r['aggregate_tok_s']:.2f} tok/s aggregate, "
              f"{r['per_stream_tok_s']:.2f} tok/s per stream (median of {rounds})")
    return results


def _median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["aggregate_tok_s"])[(len(runs) - 1) // 2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.server_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=None, help="a running server's base URL (…/v1)")
    p.add_argument("--model", default=None, help="for the child server (default: built-in)")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--direct", action="store_true", help="no HTTP: Engine.submit in-process")
    p.add_argument("--api-key", default=None)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    child, url = None, args.url
    if args.direct:
        url = DirectTarget(args.model)
    elif url is None:
        port = _free_port()
        url = f"http://127.0.0.1:{port}/v1"
        cmd = [sys.executable, "-m", "engine", "serve", "--port", str(port)]
        child = subprocess.Popen(cmd + (["--model", args.model] if args.model else []),
                                 env=os.environ.copy())
    try:
        results = asyncio.run(run(url, args.streams, args.max_tokens, args.api_key,
                                  args.rounds))
    finally:
        if child is not None:
            child.send_signal(signal.SIGTERM)     # SIGINT is ignored in background jobs
            child.wait(timeout=60)
        if isinstance(url, DirectTarget):
            url.engine.close()
    if len(results) > 1:
        print(f"speed-up {results[-1]['aggregate_tok_s'] / results[0]['aggregate_tok_s']:.2f}x"
              f" ({results[-1]['streams']} streams vs {results[0]['streams']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
