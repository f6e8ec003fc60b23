"""The warm-up at load: each fixed shape (engine/core/shapes.py) runs once, so MLX
compiles its kernels while the loading bar shows it, not in a user's first steps.

Every warm-up forward is made of padding rows: its K/V go to the scratch page 0 and
its recurrent state to the runner's scratch slot, so no sequence's cache changes. On
CUDA the compiled kernels land in the user's cache folder (engine/kernel_cache.py),
so a second start finds them there and the warm-up takes a few forwards' time.
"""
from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.shapes import chunk_lengths, decode_sizes
from engine.events import LoadProgress


def should_warm_up(config: EngineConfig) -> bool:
    """config.warm_up, or when None: on a GPU (the CPU backend compiles nothing per shape)."""
    if config.warm_up is not None:
        return config.warm_up
    return mx.default_device().type == mx.DeviceType.gpu


def warm_up_shapes(config: EngineConfig) -> list[tuple[str, int]]:
    """("decode", batch) for every decode size, then for every chunk length n
    ("prefill", n) (a chunk of exactly n tokens) and ("padded prefill", n) (fewer,
    right-padded to n: the masked path most prompts' last chunk takes)."""
    return ([("decode", b) for b in decode_sizes(config.max_num_seqs)]
            + [(kind, n) for n in chunk_lengths(config.prefill_chunk)
               for kind in (("prefill", "padded prefill") if n > 1 else ("prefill",))])


def warm_up(runner: Runner, config: EngineConfig, report: Callable[[LoadProgress], None],
            start: float = 0.9, end: float = 1.0) -> None:
    """Run every shape once, reporting progress from `start` to `end` of the bar."""
    shapes = warm_up_shapes(config)
    for i, (kind, size) in enumerate(shapes):
        what = f"batch of {size}" if kind == "decode" else f"{size}-token prompt chunk"
        report(LoadProgress(start + (end - start) * i / len(shapes),
                            f"Compiling kernels: {kind}, {what} ({i + 1}/{len(shapes)})"))
        if kind == "decode" and runner.compiled is not None:
            # A compiled forward traces full and padded batches apart.
            logits = [runner.warm_decode(size, padded) for padded in (False, True)]
        elif kind == "decode":
            logits = runner.warm_decode(size)
        else:
            logits = runner.warm_prefill(size, size if kind == "prefill" else size - 1)
        mx.eval(logits, runner.cache_arrays())
