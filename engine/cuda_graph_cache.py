"""Keep a long-lived CUDA process serving when MLX's graph-exec cache misses.

MLX's CUDA backend keeps one instantiated graph per graph topology, 400 of them
(``MLX_CUDA_GRAPH_CACHE_SIZE``), and by default throws ``RuntimeError: Cache thrashing
is happening`` once that cache has missed twice its capacity over the process's life:
the count is never reset (``mlx/backend/cuda/lru_cache.h``; another MLX server hit it,
lablup/mlxcel#818). Every miss is an instantiate of a few milliseconds of host time,
so misses are a speed question, and the bench and py-spy measure them
(docs/RELIABILITY.md); but a server or app that has run for hours must not end every
request with an error once the 800th miss comes. ``MLX_ENABLE_CACHE_THRASHING_CHECK=0``
turns the throw off (MLX reads it when the GPU stream's encoder is made, on first use):
``engine/__init__.py`` calls this before anything imports mlx. A value the user (or a
test) already chose is kept. Only MLX's CUDA backend reads it; Metal keeps no such
cache. Plain Python: no mlx here.
"""
from __future__ import annotations

import os

ENV_VAR = "MLX_ENABLE_CACHE_THRASHING_CHECK"


def keep_serving_on_cache_misses() -> None:
    """Turn MLX's cache-thrashing abort off, unless the variable is already set."""
    os.environ.setdefault(ENV_VAR, "0")
