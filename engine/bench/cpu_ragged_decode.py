"""Eight conversations of different lengths at once vs one, through Engine.submit.

    PYTHONPATH=. python -m engine.bench.cpu_ragged_decode [--model PATH] [--max-tokens 64]

The decode bench's rows share one prompt length; real conversations do not, and rows
of different contexts take attention's masked path. This reports aggregate tok/s of
8 such requests (prompts included, seeded sampling) against one, in one process.
"""
from __future__ import annotations

import argparse
import asyncio
import time

from engine import Engine, EngineConfig, SamplingParams


def _messages(i: int) -> list[dict]:
    return [{"role": "user", "content": "Write a long story about " + "a very " * i
             + "old lighthouse."}]


async def _level(engine: Engine, n: int, max_tokens: int) -> float:
    t0 = time.perf_counter()
    handles = [engine.submit(_messages(i), SamplingParams(max_tokens=max_tokens,
                                                          temperature=0.7, seed=i))
               for i in range(n)]
    tokens = 0
    for h in handles:
        async for _ in h:
            pass
        tokens += len(h.finished.token_ids)
    return tokens / (time.perf_counter() - t0)


async def _run(engine: Engine, max_tokens: int) -> None:
    await _level(engine, 2, 8)                          # warm-up
    for n in (1, 8):
        print(f"{n} conversations: {await _level(engine, n, max_tokens):.1f} tok/s aggregate",
              flush=True)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m engine.bench.cpu_ragged_decode",
                                description=__doc__)
    p.add_argument("--model", default=None)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    with Engine.load(args.model, EngineConfig()) as engine:
        asyncio.run(_run(engine, args.max_tokens))


if __name__ == "__main__":
    main()
