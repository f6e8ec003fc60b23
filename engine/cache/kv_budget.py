"""How many KV pages the pool gets: a memory budget divided by the loaded model's
bytes per page.

The budget is EngineConfig.kv_budget_mb, or (None) the automatic one: what the model
can use (every sequence at full context, max_num_seqs x max_context tokens, plus the
recurrent-state slots), capped by AUTO_SHARE (1/16) of the machine's TOTAL memory and by
half of what the weights leave of it. Total memory and the weights do not change
between loads of one model, so neither does the pool: sizing from the memory *free*
at the moment gave a different pool on every load (3608, 2362, 1827, 2414 MB seen),
and a 135M model took gigabytes it could never fill. The recurrent-state slots (one
per sequence and kept turn) come out of the same budget. Whatever the budget, the pool
it buys must fit the memory left (engine/cache/memory_guard.py), and on a Mac the
weights and the pool are wired.
"""
from __future__ import annotations

import os

from engine.cache import memory_guard
from engine.config import EngineConfig

# Of total memory, at most. A small share: the OS, the app and activations need the rest,
# and pages a model never fills are memory taken for nothing (the pool is allocated at
# load). The built-in 135M model in float32 on the CPU (45 KB a token) could fill 5.6 GB
# at 16 x 8192 tokens; on 24 GB it gets 1.5 GB (33k tokens: 2k for each of 16 chats at
# once, any one of them up to its full context). The hybrid 35B model on a 64 GB Mac
# (~4 GB at 16 x 8192, state slots included) gets 3 GB. Settings can ask for more.
AUTO_SHARE = 1 / 16
AFTER_WEIGHTS_SHARE = 0.5  # of what the weights leave: a big model on a small machine
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
                  else auto_budget_bytes(config, spec))
        pages = max(2, min((budget - slots) // per_page + 1, config.max_useful_pages))
    if guard:
        _guard(config, pages * per_page + slots)
    return pages


def _guard(config: EngineConfig, pool_bytes: int) -> None:
    import mlx.core as mx
    memory_guard.check_fits(pool_bytes, memory_guard.available_bytes(mx), config.kv_budget_mb)
    memory_guard.wire(mx, mx.get_active_memory(), pool_bytes)


def auto_budget_bytes(config: EngineConfig, spec, total: int | None = None,
                      weights: int | None = None) -> int:
    """The automatic budget (state slots included): what the model can use, within
    AUTO_SHARE of `total` memory and AFTER_WEIGHTS_SHARE of what `weights` leave
    (both asked of mlx and the OS when None: engine thread only)."""
    per_page = config.page_size * spec.kv_bytes_per_token()
    need = ((config.max_useful_pages - 1) * per_page
            + config.num_state_slots * spec.state_bytes_per_slot())
    total = total_memory_bytes() if total is None else total
    weights = weights_bytes() if weights is None else weights
    cap = min(AUTO_SHARE * total, AFTER_WEIGHTS_SHARE * max(total - weights, 0))
    return int(min(need, cap))


def total_memory_bytes() -> int:
    """The memory the KV pool lives in: the device's recommended working set on Metal
    and CUDA, the machine's RAM on the CPU (engine thread: asks mlx)."""
    import mlx.core as mx  # here, not at the top: this module's callers need no mlx
    info = mx.device_info()
    total = info.get("max_recommended_working_set_size") or info.get("memory_size")
    return int(total) if total else machine_ram_bytes()


def weights_bytes() -> int:
    """What mlx holds now: the weights just loaded (the pool is not allocated yet)."""
    import mlx.core as mx
    return int(mx.get_active_memory())


def free_memory_bytes() -> int:
    """Memory still free after what mlx holds (shown by tools; the pool no longer
    follows it: it changes from one moment to the next)."""
    return max(total_memory_bytes() - weights_bytes(), 0)


def machine_ram_bytes() -> int:
    """Physical RAM from the OS (no mlx, no psutil): the most a KV budget can be. The
    app's Settings read it to bound the KV field."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 << 30        # unknown OS: assume a modest 4 GiB
