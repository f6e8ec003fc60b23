"""What an engine leaves in device memory once it is closed: MLX's active bytes with the
model open, closed while still referenced, and closed and dropped (the app's model
switch: app/controllers/bridge.py drops its reference after Engine.close).

Run: python3 -m engine.bench.close_memory [--model synthetic:qwen3.5-35b-a3b]
(H100, session 37: 20.44 GB open, 19.52 closed and referenced, 0.000 dropped).
"""
from __future__ import annotations

import argparse
import gc
import weakref

import mlx.core as mx

from engine.bench.engine_start import open_engine
from engine.config import EngineConfig


def _held() -> str:
    return (f"{mx.get_active_memory() / 1e9:.3f} GB active, "
            f"cache {mx.get_cache_memory() / 1e9:.3f} GB")


def _settled() -> str:
    gc.collect()
    mx.clear_cache()
    return _held()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.close_memory")
    p.add_argument("--model", default="synthetic:qwen3.5-35b-a3b")
    args = p.parse_args(argv)
    print(f"before: {_held()}", flush=True)
    engine = open_engine(args.model, EngineConfig(max_num_seqs=4, page_size=16,
                                                  num_pages=256, max_context=1024))
    print(f"open: {_held()}", flush=True)
    alive = weakref.ref(engine)
    engine.close()
    print(f"closed, still referenced: {_settled()}", flush=True)
    del engine
    print(f"closed and dropped: {_settled()}; the Engine object "
          f"{'still alive' if alive() is not None else 'gone'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
