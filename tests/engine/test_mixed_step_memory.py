"""A mixed step's extra memory follows its tokens, never the KV pool (issue 21).

The regression this guards: two groups of rows (decode rows and a prompt chunk) each
scattered their K/V into the same pool, the second scatter after the first group's
attention had read it, so MLX could not update the pool in place and copied it, per
layer and per step: on a CPU every mixed step touched (page-faulted and zeroed) memory
in proportion to the pool, and streams dropped to one token per ~3 s. The signature is
deterministic, no timing: the peak memory a step adds above the steady state
(mx.get_peak_memory) must not grow with the pool, and must stay far below one layer's
share of it.
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama

from engine.config import EngineConfig
from engine.core import pool_scatters
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence

PAGE = 16
SMALL_POOL, LARGE_POOL = 512, 8192    # pages; the large pool is 16x the small one
RNG = np.random.default_rng(3)


def _model(kind: str):
    if kind == "llama":
        return tiny_llama()
    config = tiny_config(kind)
    return build_model(config, random_weights(config, seed=5))


@pytest.fixture(scope="module", params=["llama", "qwen3_5_moe"])
def model(request):
    return _model(request.param)


def _seq(i: int, length: int) -> Sequence:
    s = Sequence(i, RNG.integers(0, 320, length).tolist())
    s.pages, s.slot, s.prefill_target = list(range(1 + 8 * i, 9 + 8 * i)), i, length - 1
    return s


def _runner_with_streams(model, num_pages: int) -> tuple[Runner, list[Sequence]]:
    """A runner with a pool of num_pages and three sequences prefilled, ready to decode."""
    config = EngineConfig(max_num_seqs=4, page_size=PAGE, num_pages=num_pages,
                          prefix_cache=False, prefill_chunk=32)
    runner = Runner(model, config)
    streams = [_seq(i, 20) for i in range(3)]
    mx.eval(runner.prefill([PrefillChunk(s, 0, s.prefill_target) for s in streams]),
            runner.cache_arrays())
    for s in streams:
        s.num_computed = s.prefill_target
    return runner, streams


def _extra_peak(model, num_pages: int, step, kept: list | None = None) -> tuple[int, int]:
    """(bytes a step adds above the steady state, bytes of one layer's K+V pool). kept:
    if given, gets the bytes still allocated after each step (what a failure reports:
    a step's own allocation that stays, against a transient one)."""
    runner, streams = _runner_with_streams(model, num_pages)
    new = _seq(3, 40)
    new.prefill_target = 40
    extra = []
    for _ in range(2):                  # the second step: nothing left to allocate once
        mx.eval(runner.cache_arrays())
        # On CUDA an array's buffer is freed when the work that read it completes (a
        # completion handler, after eval returns): without the wait, frees of earlier
        # work land inside the measured step at times of the host's choosing and move
        # its extra peak by +-0.6 MB, with no trend in the pool (session 49's H100,
        # pools of 512..16,384 pages).
        mx.synchronize()
        mx.reset_peak_memory()
        base = mx.get_active_memory()
        pool_scatters.run(step(runner, streams, [PrefillChunk(new, 0, 24)]),
                          runner.cache_arrays())
        mx.synchronize()
        extra.append(mx.get_peak_memory() - base)
        if kept is not None:
            kept.append(mx.get_active_memory() - base)
    layer_pool = runner.cache.kv[0][0].nbytes * 2
    return extra[-1], layer_pool


STEPS = {"mixed": lambda r, streams, chunks: r.mixed(streams, chunks),
         "decode": lambda r, streams, chunks: r.decode(streams),
         "prefill": lambda r, streams, chunks: r.prefill(chunks)}


@pytest.mark.parametrize("kind", list(STEPS))
def test_a_steps_extra_memory_does_not_grow_with_the_pool(model, kind):
    kept = {SMALL_POOL: [], LARGE_POOL: []}
    small, small_pool = _extra_peak(model, SMALL_POOL, STEPS[kind], kept[SMALL_POOL])
    large, layer_pool = _extra_peak(model, LARGE_POOL, STEPS[kind], kept[LARGE_POOL])
    # The same tokens, a 16x larger pool: the step's extra bytes are its activations.
    # A pool copy adds at least one layer's pool, so with the larger pool it would grow
    # by at least the pools' difference (31 MB here); the bound is 1/16 of that (~2 MB).
    # Not a byte-exact bound: on CUDA the extra peak moves by up to ~0.6 MB from run to
    # run with no trend in the pool, even with the waits in _extra_peak (sessions 48-50's
    # H100s: the MoE prefill at 896 KB with the small pool, 1,047 KB with the large one;
    # on the CPU the two differ by at most 5 KB).
    assert large <= small + (layer_pool - small_pool) / 16, (small, large, kept)
    assert large < layer_pool / 8, (large, layer_pool)


def test_saving_a_kept_turn_beside_a_step_does_not_copy_the_pool(model):
    """A turn that ends is gathered for the disk cache in the same step that writes new
    K/V (issue 22: two panes froze for 6.5 s when a third finished). The gather must be
    queued before the step's writes, or MLX copies the whole pool for them."""
    from engine.cache.cache_manager import DeviceCopies, DiskSave
    runner, streams = _runner_with_streams(model, LARGE_POOL)
    kept = streams[0]
    save = DiskSave(tuple(kept.all_ids[:16]), kept.pages[:1], kept.slot)
    mx.eval(runner.cache_arrays())
    mx.synchronize()                    # as in _extra_peak
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    saves = runner.copy(DeviceCopies(saves=[save]))
    # Queued as the step loop queues a step: on a GPU the decode's K/V scatter (a tiny
    # model's plain path) waits for the queued gather (engine/core/pool_scatters.py).
    pool_scatters.run(runner.decode(streams[1:]), runner.cache_arrays(),
                      [a for _, arrays in saves for a in arrays.values()])
    extra = mx.get_peak_memory() - base
    assert extra < runner.cache.kv[0][0].nbytes * 2 / 8, extra


def test_no_step_of_the_apps_workload_copies_the_pool(tmp_path, monkeypatch):
    """The app's workload through the public API, with the prefix cache and the disk
    cache on: streams, one ending (its turn kept and saved), its next turn (read from the
    kept turn), a new prompt beside the streams, a cancel. No step may add more than a
    fraction of one layer's pool to the peak: every write is in place."""
    from tiny_models import write_tiny_llama

    from engine import Engine, SamplingParams
    from engine.core import step_loop
    peaks = []
    step = step_loop.StepLoop.step

    def measured_step(self):
        mx.reset_peak_memory()
        base = mx.get_active_memory()
        step(self)
        peaks.append(mx.get_peak_memory() - base)
    monkeypatch.setattr(step_loop.StepLoop, "step", measured_step)
    folder = write_tiny_llama(tmp_path / "llama")
    config = EngineConfig(num_pages=LARGE_POOL, page_size=PAGE, prefill_chunk=16,
                          min_stream_tok_s=0.0, cache_dir=str(tmp_path / "cache"))
    greedy = dict(temperature=0.0)
    with Engine.load(folder, config) as engine:
        prompts = [RNG.integers(5, 300, n).tolist() for n in (20, 33, 47)]
        first, *others = [engine.submit(p, SamplingParams(max_tokens=m, **greedy))
                          for p, m in zip(prompts, (4, 40, 40))]
        done = first.result()
        next_turn = prompts[0] + list(done.token_ids) + RNG.integers(5, 300, 9).tolist()
        later = [engine.submit(next_turn, SamplingParams(max_tokens=8, **greedy)),
                 engine.submit(RNG.integers(5, 300, 40).tolist(),
                               SamplingParams(max_tokens=8, **greedy))]
        others[0].cancel()
        for h in others + later:
            h.result()
        reused = later[0].result().stats.cached_tokens
    layer_pool = 2 * PAGE * LARGE_POOL * 2 * 16 * 4        # K+V, 2 KV heads of 16, f32
    assert done.finish_reason == "length" and reused > 0 and len(peaks) > 20
    assert max(peaks) < layer_pool / 8, (max(peaks), layer_pool)
