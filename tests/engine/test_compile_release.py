"""What an engine thread compiled is dropped on that thread before it ends
(engine/core/compile_release.py): MLX keeps the traces in a cache of the thread's own,
holding Python objects, and a trace left at the thread's exit is released with no
interpreter state (ml-explore/mlx#4347, #4327: a crash at exit)."""
from __future__ import annotations

import gc
import threading

import mlx.core as mx
from fakes import IdTokenizer
from qwen_fixtures import build_model, random_weights, tiny_config

import engine.core.sampler as sampler
from engine.config import EngineConfig
from engine.core.compiled_forward import CompiledForward
from engine.core.engine import Engine
from engine.core.sampler import RowSampler, release_compiled_draws, sample_batch
from engine.loading.model_bundle import InMemoryModel
from engine.sampling_params import SamplingParams

APP = SamplingParams(temperature=0.7, top_p=0.95)


# How long a thread may take to compile its draw: on a GPU with a cold kernel cache, the
# sampler's kernels compile first (more than 60 s with 12 test workers compiling at once,
# session 47's H100). A bound on a hang, not a timing.
DRAW_LIMIT_S = 600


def _draw(release: bool, drew: threading.Event | None = None,
          done: threading.Event | None = None, errors: list | None = None) -> None:
    """Make a compiled draw on this thread (and drop it when told), say so, then wait for
    `done`. An error goes to `errors` (a thread's exception would otherwise be lost)."""
    try:
        mx.eval(sample_batch(mx.zeros((2, 64)), [RowSampler(APP), RowSampler(APP)],
                             compiled=True))
        if release:
            release_compiled_draws()
    except Exception as e:      # noqa: BLE001 - reported by the test
        if errors is None:
            raise
        errors.append(repr(e))
    if drew is not None:
        drew.set()
    if done is not None:
        done.wait()
    mx.clear_streams()


def test_a_thread_drops_its_own_compiled_draws_and_no_one_elses():
    drew, done, errors = threading.Event(), threading.Event(), []
    kept = threading.Thread(target=_draw, args=(False, drew, done, errors))  # lives on: its
    kept.start()                                                         # ident is not reused
    assert drew.wait(DRAW_LIMIT_S)
    dropped = threading.Thread(target=_draw, args=(True, None, None, errors))
    dropped.start()
    dropped.join()
    try:
        assert not errors
        owners = {key[0] for key in sampler._COMPILED}
        assert kept.ident != dropped.ident
        assert kept.ident in owners and dropped.ident not in owners
    finally:
        done.set()
        kept.join()
        for key in [k for k in sampler._COMPILED if k[0] == kept.ident]:
            del sampler._COMPILED[key]


def test_a_closed_engine_leaves_no_compiled_function_behind(monkeypatch):
    monkeypatch.setattr(sampler, "_on_gpu", lambda: True)     # the draws compiled, as on a GPU
    gc.collect()
    config = EngineConfig(max_num_seqs=2, kv_budget_mb=8, prefill_chunk=16,
                          fixed_shapes=True, compile_decode=True, warm_up=False)
    kind = "qwen3_5_moe"
    model = build_model(tiny_config(kind), random_weights(tiny_config(kind), seed=3))
    with Engine.from_model(InMemoryModel(model, IdTokenizer(), tiny_config(kind), "tiny"),
                           config) as engine:
        out = engine.generate([[5, 9, 11, 3]], SamplingParams(max_tokens=6, temperature=0.7,
                                                                top_p=0.95))
        thread = engine._thread.ident
        assert len(out[0].token_ids) == 6
        assert any(key[0] == thread for key in sampler._COMPILED)      # it compiled draws
    # the engine thread dropped its draws and its compiled forwards as it ended; without
    # that, the forwards' cycle would still hold their traces here (no collection since)
    assert not any(key[0] == thread for key in sampler._COMPILED)
    assert not [o for o in gc.get_objects() if isinstance(o, CompiledForward) and o.num_layouts]
