"""The disk cache through the public Engine: a conversation resumes in a new Engine,
and a full disk is announced with an event while generation goes on."""
from __future__ import annotations

import errno

import numpy as np
import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.cache import disk_cache
from engine.cache.disk_cache import list_files
from engine.events import CacheNoticeEvent

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
HISTORY = np.random.default_rng(8).integers(5, 300, 41).tolist()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")


def config(cache_dir=None, **over) -> EngineConfig:
    return EngineConfig(num_pages=64, page_size=4, prefill_chunk=16,
                        cache_dir=str(cache_dir) if cache_dir else None, **over)


def run(folder, cfg, prompt):
    with Engine.load(folder, cfg) as engine:
        return engine.generate([prompt], GREEDY)[0]


def test_a_new_engine_reuses_the_history_written_by_the_last_one(folder, tmp_path):
    first = run(folder, config(tmp_path), HISTORY)
    assert list_files(tmp_path)                       # written by the time close returns
    follow = HISTORY + list(first.token_ids) + [11, 12, 13]
    resumed = run(folder, config(tmp_path), follow)
    scratch = run(folder, config(), follow)
    assert resumed.stats.cached_tokens >= len(HISTORY) + len(first.token_ids) - 1
    assert scratch.stats.cached_tokens == 0
    assert resumed.token_ids == scratch.token_ids


def test_another_model_in_the_same_folder_never_reads_these_files(folder, tmp_path):
    run(folder, config(tmp_path), HISTORY)
    other = write_tiny_llama(tmp_path / "other", seed=1)
    out = run(other, config(tmp_path), HISTORY + [11, 12])
    assert out.stats.cached_tokens == 0


def test_a_full_disk_is_announced_and_generation_goes_on(folder, tmp_path, monkeypatch):
    def full(path, tensors, key):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(disk_cache, "write_entry", full)
    notices = []
    with Engine.load(folder, config(tmp_path)) as engine:
        engine.add_listener(lambda ev: isinstance(ev, CacheNoticeEvent) and notices.append(ev))
        engine.generate([HISTORY], GREEDY)
        engine.generate([HISTORY[:20]], GREEDY)        # the notice arrives between requests
        out = engine.generate([HISTORY + [3, 4]], GREEDY)[0]
    assert out.token_ids and out.stats.cached_tokens > 0   # memory cache still on
    assert len(notices) == 1 and "full" in notices[0].message


def test_a_reply_ended_by_close_is_on_disk_for_the_next_engine(folder, tmp_path):
    """close() ends a streaming reply as "cancelled"; its turn is kept, so it is written
    before the writer stops: the next engine resumes the conversation from disk."""
    engine = Engine.load(folder, config(tmp_path))
    handle = engine.submit(HISTORY, SamplingParams(max_tokens=200, temperature=0.0))
    engine.add_listener(lambda ev: ev.__class__.__name__ == "TokenEvent" and engine.close())
    cut = handle.result(30)
    engine._thread.join(30)                 # the disk cache's writer is done with it
    assert cut.finish_reason == "cancelled" and 0 < len(cut.token_ids) < 200
    assert list_files(tmp_path)
    follow = HISTORY + list(cut.token_ids) + [11, 12, 13]
    resumed = run(folder, config(tmp_path), follow)
    assert resumed.stats.cached_tokens >= len(HISTORY)
    assert resumed.token_ids == run(folder, config(), follow).token_ids


def test_cpu_dense_and_quantized_weights_never_share_entries(tmp_path):
    """Their K/V differ in the last bits: the weights mode is part of the model key."""
    from engine.cache.model_identity import model_key, weights_mode
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    keys = {model_key(tmp_path, {"a": 1}, weights_mode(None, mode), "layout")
            for mode in ("dense", "quantized", "as loaded")}
    assert len(keys) == 3
