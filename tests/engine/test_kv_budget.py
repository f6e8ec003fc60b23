"""The KV pool is sized from a memory budget and the model's bytes per token."""
from __future__ import annotations

import mlx.core as mx
from tiny_models import tiny_llama, write_tiny_llama

from engine import Engine, EngineConfig
from engine.cache.kv_budget import MIB, free_memory_bytes, num_pages_for
from engine.models.base import CacheSpec, StateSpec

SPEC = CacheSpec(num_kv_layers=2, num_kv_heads=2, head_dim=64, kv_dtype=mx.float16)


def test_bytes_per_token_counts_k_and_v_of_every_attention_layer():
    assert SPEC.kv_bytes_per_token() == 2 * 2 * 2 * 64 * 2
    spec = CacheSpec(1, 1, 8, mx.float32, ((StateSpec((4, 8), mx.float32),),))
    assert spec.state_bytes_per_slot() == 4 * 8 * 4


def test_a_budget_in_mib_gives_pages_of_that_size():
    cfg = EngineConfig(kv_budget_mb=16, page_size=16, max_context=100_000)
    per_page = 16 * SPEC.kv_bytes_per_token()           # 16 KiB
    assert num_pages_for(cfg, SPEC) == 16 * MIB // per_page + 1


def test_state_slots_come_out_of_the_budget():
    spec = CacheSpec(2, 2, 64, mx.float16, ((StateSpec((1024, 64), mx.float32),),))
    cfg = EngineConfig(kv_budget_mb=16, page_size=16, max_context=100_000)
    state = cfg.num_state_slots * 1024 * 64 * 4
    assert num_pages_for(cfg, spec) == (16 * MIB - state) // (16 * spec.kv_bytes_per_token()) + 1


def test_the_pool_stops_where_every_sequence_is_full_and_an_override_wins():
    cfg = EngineConfig(kv_budget_mb=100_000, max_num_seqs=2, max_context=64, page_size=16)
    assert num_pages_for(cfg, SPEC) == 2 * 4 + 1 == cfg.max_useful_pages
    assert num_pages_for(EngineConfig(num_pages=37, kv_budget_mb=1), SPEC) == 37


def test_auto_budget_uses_free_memory(tmp_path):
    assert free_memory_bytes() > 0
    spec = tiny_llama().cache_spec()
    cfg = EngineConfig(max_context=256)
    assert 2 <= num_pages_for(cfg, spec) <= cfg.max_useful_pages
    with Engine.load(write_tiny_llama(tmp_path / "llama"), cfg) as engine:
        assert engine.num_pages == num_pages_for(cfg, spec)
        assert engine.generate([[1, 2, 3]])[0].token_ids
