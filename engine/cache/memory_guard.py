"""Memory the machine must hold for a model: refuse a KV pool it cannot hold, and on a Mac
keep the weights and the pool wired (resident).

Users of mlx-lm and oMLX report IOGPU kernel panics and reboots on Macs when batching
pushes the GPU's memory past what macOS lets it keep resident, and swapping when a pool
is larger than the free memory. Two guards, run once per load after the weights are in
memory and before the pool is allocated (kv_budget.num_pages_for):

- `check_fits`: the pool the budget buys (pages and state slots, after the cap at what
  every sequence at full context could fill) must fit in the memory still available:
  Metal's recommended working set (or CUDA's memory) minus what MLX holds now (the
  weights), or on the CPU the RAM the OS says is available. Otherwise a
  MemoryBudgetError says how much there is and what to do, instead of swapping.
- `wire`: on Metal, mx.set_wired_limit(weights + pool + headroom), capped at the
  recommended working set (a larger value is an error in MLX), so the pages a step
  touches stay resident. Elsewhere it does nothing and says why (status()).

Not verified on a Mac: this machine has no Metal device. The Metal path is exercised
here against a stand-in for mx (tests/reliability/test_memory_guard.py), and the
limit it sets is what MLX's documentation and mlx-lm's own wired_limit() do.
"""
from __future__ import annotations

from pathlib import Path

from engine.errors import MemoryBudgetError

MIB = 1 << 20
HEADROOM = 0.10              # activations and MLX's buffers beside the weights and pool
_status = {"wired_limit": "not set (no model loaded yet)"}


def status() -> dict[str, str]:
    """What the last load did about the wired limit (for logs and the status panel)."""
    return dict(_status)


def available_bytes(mx) -> int:
    """Memory a new pool may come from, now (the weights already loaded)."""
    info = mx.device_info()
    total = info.get("max_recommended_working_set_size") or info.get("memory_size")
    if total:                 # a GPU: Metal's unified memory, or CUDA's
        return max(int(total) - mx.get_active_memory(), 0)
    return ram_available_bytes()


def ram_available_bytes() -> int:
    """RAM the OS could give without swapping: Linux's MemAvailable (free + reclaimable
    cache), elsewhere the free pages (a lower bound)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import os
    for name in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(name) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return 4 << 30


def check_fits(pool_bytes: int, available: int, budget_mb: int | None) -> None:
    """Refuse a pool the memory left cannot hold (budget_mb: what was asked, for the
    message; None: the automatic budget, which is a share of `available` and fits)."""
    if pool_bytes <= available:
        return
    asked = f"The KV budget of {budget_mb} MB" if budget_mb else "The KV cache"
    raise MemoryBudgetError(
        f"{asked} needs {pool_bytes // MIB} MB, but only {available // MIB} MB of memory "
        "is left once the model is loaded; it would swap (or, on a Mac, risk a GPU "
        f"memory fault). Lower the KV budget in Settings (at most {available // MIB} MB "
        "here), choose Automatic, or close other programs.")


def wire(mx, weights_bytes: int, pool_bytes: int) -> int | None:
    """Keep weights + pool resident on Metal; returns the limit set (None: not set)."""
    metal = getattr(mx, "metal", None)
    if metal is None or not metal.is_available() or not hasattr(mx, "set_wired_limit"):
        _status["wired_limit"] = "not set: no Metal device (only Macs have one)"
        return None
    info = mx.device_info()
    ceiling = int(info.get("max_recommended_working_set_size") or 0)
    want = int((weights_bytes + pool_bytes) * (1 + HEADROOM))
    limit = min(want, ceiling) if ceiling else want
    try:
        mx.set_wired_limit(limit)
    except (ValueError, RuntimeError) as e:    # above the system's iogpu.wired_limit_mb
        _status["wired_limit"] = f"not set: MLX refused {limit // MIB} MB ({e})"
        return None
    capped = " (capped at the recommended working set)" if ceiling and want > ceiling else ""
    _status["wired_limit"] = f"{limit // MIB} MB{capped}"
    return limit
