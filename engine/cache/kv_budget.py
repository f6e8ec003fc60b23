"""How many KV pages the pool gets: a memory budget divided by the loaded model's
bytes per page.

The budget is EngineConfig.kv_budget_mb, or (None) AUTO_FRACTION of the memory
still free once the weights are loaded: the device's working set on Metal and
CUDA, the machine's available RAM on the CPU. The recurrent-state slots (one per
sequence and kept turn) come out of the same budget. More pages than every
sequence at full context could fill buy nothing, so the pool stops there.
"""
from __future__ import annotations

import os

from engine.cache import memory_guard
from engine.config import EngineConfig

AUTO_FRACTION = 0.5       # of the free memory: leaves room for activations and the app
MIB = 1 << 20


def num_pages_for(config: EngineConfig, spec, guard: bool = True) -> int:
    """Pages in the pool (scratch page included) for a model's CacheSpec. guard (the
    engine calls this with the weights in memory): refuse a pool the memory left cannot
    hold and, on a Mac, wire the weights and the pool (memory_guard.py)."""
    slots = config.num_state_slots * spec.state_bytes_per_slot()
    per_page = max(config.page_size * spec.kv_bytes_per_token(), 1)
    if config.num_pages is not None:
        pages = config.num_pages
    else:
        budget = (config.kv_budget_mb * MIB if config.kv_budget_mb is not None
                  else int(AUTO_FRACTION * free_memory_bytes()))
        pages = max(2, min((budget - slots) // per_page + 1, config.max_useful_pages))
    if guard:
        _guard(config, pages * per_page + slots)
    return pages


def _guard(config: EngineConfig, pool_bytes: int) -> None:
    import mlx.core as mx
    memory_guard.check_fits(pool_bytes, memory_guard.available_bytes(mx), config.kv_budget_mb)
    memory_guard.wire(mx, mx.get_active_memory(), pool_bytes)


def free_memory_bytes() -> int:
    """Memory the KV pool may come from, after the weights (engine thread: asks mlx)."""
    import mlx.core as mx  # here, not at the top: this module's callers need no mlx
    info = mx.device_info()
    total = info.get("max_recommended_working_set_size") or info.get("memory_size")
    if total:                 # a GPU (Metal's unified memory, or CUDA's)
        return max(int(total) - mx.get_active_memory(), 0)
    return _available_ram()


def _available_ram() -> int:
    """Available RAM from the OS (no psutil); total RAM where 'available' is unknown."""
    for name in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(name) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return 4 << 30            # unknown OS: assume a modest 4 GiB
