"""The warm-up at load: each fixed shape (engine/core/shapes.py) runs once, so MLX
compiles its kernels while the loading bar shows it, not in a user's first steps.

Every warm-up forward is made of padding rows: its K/V go to the scratch page 0 and
its recurrent state to the runner's scratch slot, so no sequence's cache changes. On
CUDA the compiled kernels land in the user's cache folder (engine/kernel_cache.py),
so a second start finds them there and the warm-up takes a few forwards' time.

A compiled decode (engine/core/compiled_forward.py) is traced once per shape, and its
block tables come in widths of 8, 16, 32... pages (shapes.table_widths): a context
crossing 128, 256, 512... tokens (pages of 16) is a new shape at every batch size. So the
compiled decode is warmed at every decode size x every width up to max_context, each as
a full and as a padded batch: 7 widths for 8,192 tokens, 4 x 7 x 2 = 56 compiled
forwards for max_num_seqs=8 (was 4 x 2 = 8 at the first width only, and a conversation
that grew past 128 tokens traced there, mid-decode; tests/engine/test_warm_up_traces.py).

Mixed forwards (decode rows and a prompt chunk as one forward, runs_mixed_forwards)
meet shapes of their own where fixed shapes are on: their token-wise parts run on
Bd + T tokens. The warm-up runs, for every chunk length up to prefill_chunk, one mixed
forward beside the largest decode batch a step with a prompt can have (max_num_seqs - 1
rows, padded), and the padded (ragged) chunk once beside one decode row: 6 + 6 = 12
forwards more than the 17 of decode and prefill by default. Not every decode size: on the
H200 a first start that warmed every decode size x chunk length (36 mixed forwards) plus
the compiled decode traces did not finish its warm-up within 6 minutes with a cold kernel
cache (docs/bench/HISTORY.md), and MLX's CUDA kernels are compiled per kind of shape (dtype,
rank, tile class), not per row count, so the other sizes mostly find them compiled. Not
yet measured: whether a first mixed step at another decode size still stalls. Several
prompts in one step (a [Bp > 1, T] chunk group) are not warmed, as for plain prefills.
Where no mixed forward runs (the default on a GPU with compiled decode and uncompiled
chunks: runs_mixed_forwards) none is warmed: 40 shapes instead of 52 for
max_num_seqs=8, prefill_chunk=512, max_context=8192 (tests/engine/test_stable_shapes.py).

In the background (EngineConfig.warm_up_in_background, the default): on a fresh H200 a
first start of the full-size model took ~6 minutes before "Ready", nearly all of it this
warm-up (docs/PERFORMANCE.md, "First start on CUDA"). Most shapes serve a second
conversation or a long one, not the first reply, so only `load_shapes` run before
"Ready": every prompt-chunk shape (a first prompt of any length) and a one-row decode at
the first block-table width. `BackgroundWarmUp` runs the rest while the engine is idle,
one shape at a time between inbox reads, in the order a user meets them (the one row's
wider tables, then two rows...): a request waits for at most the one shape in progress.
A shape a step meets before its turn compiles in that step, as without a warm-up, and
its later turn finds it compiled.
"""
from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

import mlx.core as mx

from engine.arith import ceil_div
from engine.config import EngineConfig
from engine.core import pool_scatters
from engine.core.compiled_forward import compiles_forward, runs_mixed_forwards
from engine.core.runner import Runner, pads_to_fixed_shapes
from engine.core.sampler import app_sampling_draws
from engine.core.shapes import (
    chunk_layouts,
    chunk_lengths,
    decode_sizes,
    padded_batch,
    table_widths,
)
from engine.events import LoadProgress
from engine.models.base import kernel_set_of


def should_warm_up(config: EngineConfig) -> bool:
    """config.warm_up, or when None: on a GPU (the CPU backend compiles nothing per shape)."""
    if config.warm_up is not None:
        return config.warm_up
    return mx.default_device().type == mx.DeviceType.gpu


def warm_up_shapes(config: EngineConfig) -> list[tuple]:
    """The decode shapes (decode_shapes), then for every chunk length n
    ("prefill", n) (a chunk of exactly n tokens) and ("padded prefill", n) (fewer,
    right-padded to n: the masked path most prompts' last chunk takes), then the mixed
    forwards' ("mixed", batch, n) and ("padded mixed", 1, n) (module docstring)."""
    lengths = chunk_lengths(config.prefill_chunk)
    return (decode_shapes(config)
            + [(kind, n) for n in lengths
               for kind in (("prefill", "padded prefill") if n > 1 else ("prefill",))]
            + mixed_shapes(config) + compiled_chunk_shapes(config))


def compiled_chunk_shapes(config: EngineConfig) -> list[tuple]:
    """With compiled prompt chunks (EngineConfig.compile_chunks, fixed shapes): every layout
    a chunk can trace (shapes.chunk_layouts), a prompt's first chunks ("compiled
    prefill", before "Ready": a first prompt meets them) and later ones ("compiled
    chunk", in the background). Without them a prompt read in chunks beside streams
    traced the whole model inside its steps at each new length and width."""
    if not (config.compile_chunks and pads_to_fixed_shapes(config)):
        return []
    layouts = chunk_layouts(config.prefill_chunk, config.page_size,
                            ceil_div(config.max_context, config.page_size))
    return [("compiled prefill" if fresh else "compiled chunk", n, w, fresh, ragged)
            for n, w, fresh, ragged in layouts]


def load_shapes(config: EngineConfig) -> list[tuple]:
    """The shapes to warm before "Ready": all of them, or with the warm-up in the
    background only what a first conversation meets (module docstring)."""
    shapes = warm_up_shapes(config)
    if not config.warm_up_in_background:
        return shapes
    first_decode = next(s for s in shapes if s[0] == "decode")
    return [s for s in shapes if s == first_decode or "prefill" in s[0]]


def background_shapes(config: EngineConfig) -> list[tuple]:
    """The rest of warm_up_shapes, in their order (one row's widths first)."""
    at_load = load_shapes(config)
    return [s for s in warm_up_shapes(config) if s not in at_load]


def decode_shapes(config: EngineConfig) -> list[tuple]:
    """("decode", batch) for every decode size; with compiled decode ("decode", batch,
    width) for every block-table width a sequence of max_context tokens can reach too:
    mx.compile traces each width apart, and a trace met while decoding builds and
    compiles the whole forward again inside that step."""
    sizes = decode_sizes(config.max_num_seqs)
    if not compiles_forward(config.compile_decode):
        return [("decode", b) for b in sizes]
    widths = table_widths(ceil_div(config.max_context, config.page_size))
    return [("decode", b, w) for b in sizes for w in widths]


def mixed_shapes(config: EngineConfig) -> list[tuple[str, int, int]]:
    """The mixed forwards' shapes a GPU meets; none without fixed shapes or mixed forwards,
    or when no decode row can run beside a prompt (max_num_seqs 1)."""
    if not (runs_mixed_forwards(config) and pads_to_fixed_shapes(config)) or config.max_num_seqs < 2:
        return []
    lengths = chunk_lengths(config.prefill_chunk)
    largest = padded_batch(config.max_num_seqs - 1, config.max_num_seqs)
    return ([("mixed", largest, n) for n in lengths]
            + [("padded mixed", 1, n) for n in lengths if n > 1])


def _describe(shape: tuple) -> str:
    kind, *sizes = shape
    if kind == "decode":
        width = f", {sizes[1]}-page block tables" if len(sizes) > 1 else ""
        return f"{kind}, batch of {sizes[0]}{width}"
    if "mixed" in kind:
        return f"{kind}, batch of {sizes[0]} beside a {sizes[1]}-token prompt chunk"
    if kind.startswith("compiled"):
        return f"{kind}, {sizes[0]}-token prompt chunk, {sizes[1]}-page block tables"
    return f"{kind}, {sizes[0]}-token prompt chunk"


def _run_shape(runner: Runner, shape: tuple):
    kind, *sizes = shape
    if kind == "decode" and runner.compiled is not None:
        # A compiled decode traces full and padded batches apart, and each width.
        batch, width = sizes
        return [runner.warm_decode(batch, padded, width) for padded in (False, True)]
    if kind == "decode":
        return runner.warm_decode(sizes[0])
    if "mixed" in kind:
        return runner.warm_mixed(sizes[0], sizes[1], padded=kind == "padded mixed")
    if kind.startswith("compiled"):
        return runner.warm_compiled_chunk(*sizes)
    n = sizes[0]
    return runner.warm_prefill(n, n if kind == "prefill" else n - 1)


def warm_up(runner: Runner, config: EngineConfig, report: Callable[[LoadProgress], None],
            start: float = 0.9, end: float = 1.0, shapes: list[tuple] | None = None) -> None:
    """Run each shape once (default: every shape), reporting progress from `start` to
    `end` of the bar."""
    shapes = warm_up_shapes(config) if shapes is None else shapes
    for i, shape in enumerate(shapes):
        report(LoadProgress(start + (end - start) * i / len(shapes),
                            f"Compiling kernels: {_describe(shape)} ({i + 1}/{len(shapes)})"))
        _warm(runner, shape)


def _warm(runner: Runner, shape: tuple) -> None:
    pool_scatters.run(_run_shape(runner, shape), runner.cache_arrays())


def warm_sampler(runner: Runner, report: Callable[[LoadProgress], None]) -> None:
    """Sample one row at the app's chat settings (temperature, top-p) from a one-row
    decode: a GPU compiles the sampler's kernels (kernels/top_p_cut, cdf_draw) now, not
    in the first reply. No forward shape reaches them: a stand-in count of the warm-up
    against a concurrency workload found them the kernels only a step met
    (tests/engine/test_warm_up_kernels.py). Writes only scratch, like every shape."""
    report(LoadProgress(0.999, "Compiling kernels: the sampler"))
    pool_scatters.run(sampled_warm_up(runner), runner.cache_arrays())


def sampled_warm_up(runner: Runner) -> mx.array:
    """warm_sampler's graph (lazy): a one-row decode, sampled at the app's settings
    (app_sampling_draws)."""
    return app_sampling_draws(runner.warm_decode(1), kernel_set_of(runner.model))


class BackgroundWarmUp:
    """The shapes left for idle time (background_shapes), run one per `run_one`.

    The engine thread calls run_one only between steps with no request to run, so a
    warm-up forward (padding rows: scratch page and slot only) never meets a step's
    arrays in flight. `done` is set once every shape ran (or one failed: the rest then
    compile when a step meets them, as without a warm-up)."""

    def __init__(self, shapes: list[tuple], done: threading.Event):
        self._shapes = list(shapes)
        self.done = done
        self.ran: list[tuple] = []
        if not self._shapes:
            done.set()

    @property
    def pending(self) -> bool:
        return bool(self._shapes)

    def run_one(self, runner: Runner) -> None:
        shape = self._shapes.pop(0)
        try:
            _warm(runner, shape)
            self.ran.append(shape)
        except Exception:       # not a request's failure: nobody waits on this shape
            traceback.print_exc()
            self._shapes.clear()
        if not self._shapes:
            self.done.set()
