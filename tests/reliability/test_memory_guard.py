"""Issue 26 item 5: a KV budget the machine cannot hold is refused with a clear message
(here, for real, against this machine's available RAM); on a Mac the weights and the pool
are wired. This machine has no Metal device: the Metal path runs against a stand-in for
mx, which checks what would be asked of MLX, not what macOS does with it."""
from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.cache import memory_guard
from engine.errors import MemoryBudgetError, TandemError

MIB = 1 << 20


def test_a_budget_beyond_the_memory_left_is_refused_then_a_good_load_works(tiny_folder):
    too_much = memory_guard.ram_available_bytes() // MIB * 4 + 1024
    # max_num_seqs and max_context large enough that the pool is not capped below the ask
    cfg = EngineConfig(kv_budget_mb=too_much, max_num_seqs=1024, max_context=1 << 20)
    with pytest.raises(MemoryBudgetError) as info:
        Engine.load(tiny_folder, cfg)
    message = str(info.value)
    assert isinstance(info.value, TandemError)
    assert f"KV budget of {too_much} MB" in message and "Lower the KV budget" in message
    with Engine.load(tiny_folder, EngineConfig(kv_budget_mb=16)) as engine:
        assert engine.generate(["hi"], SamplingParams(max_tokens=2))[0].token_ids


def test_a_budget_that_fits_or_is_capped_loads(tiny_folder):
    # 100 GB asked, but two sequences of 64 tokens fill 9 pages: the pool is tiny, it fits
    cfg = EngineConfig(kv_budget_mb=100_000, max_num_seqs=2, max_context=64, page_size=16)
    with Engine.load(tiny_folder, cfg) as engine:
        assert engine.num_pages == cfg.max_useful_pages


def test_without_metal_nothing_is_wired_and_it_says_why(tiny_folder):
    import mlx.core as mx
    if mx.metal.is_available():
        pytest.skip("a Metal device: the next tests' stand-in is not needed here")
    with Engine.load(tiny_folder, EngineConfig(kv_budget_mb=16)):
        assert memory_guard.status()["wired_limit"].startswith("not set: no Metal device")


class FakeMetalMx:
    """What memory_guard asks of mlx.core on a Mac with 64 GB (48 GB recommended)."""

    def __init__(self, refuse: bool = False):
        self.wired: list[int] = []
        self.refuse = refuse
        self.metal = type("metal", (), {"is_available": staticmethod(lambda: True)})

    def device_info(self):
        return {"max_recommended_working_set_size": 48 << 30, "memory_size": 64 << 30}

    def get_active_memory(self):
        return 20 << 30                   # a 20 GB model is loaded

    def set_wired_limit(self, n):
        if self.refuse:
            raise ValueError("[metal::set_wired_limit] Setting a wired limit larger than "
                             "the maximum working set size is not allowed.")
        self.wired.append(n)
        return 0


def test_on_metal_the_weights_and_pool_are_wired_with_headroom():
    mx = FakeMetalMx()
    limit = memory_guard.wire(mx, 20 << 30, 8 << 30)
    assert mx.wired == [limit] and limit == int((28 << 30) * 1.1)
    assert memory_guard.status()["wired_limit"] == f"{limit // MIB} MB"


def test_the_wired_limit_is_capped_at_the_recommended_working_set():
    mx = FakeMetalMx()
    assert memory_guard.wire(mx, 20 << 30, 40 << 30) == 48 << 30
    assert "capped" in memory_guard.status()["wired_limit"]


def test_mlx_refusing_the_limit_degrades_to_not_wired():
    assert memory_guard.wire(FakeMetalMx(refuse=True), 1 << 30, 1 << 30) is None
    assert "MLX refused" in memory_guard.status()["wired_limit"]


def test_on_metal_the_memory_left_is_the_working_set_minus_the_weights():
    mx = FakeMetalMx()
    assert memory_guard.available_bytes(mx) == 28 << 30
    memory_guard.check_fits(28 << 30, memory_guard.available_bytes(mx), 28 * 1024)
    with pytest.raises(MemoryBudgetError, match="only 28672 MB of memory is left"):
        memory_guard.check_fits(30 << 30, memory_guard.available_bytes(mx), 30 * 1024)
