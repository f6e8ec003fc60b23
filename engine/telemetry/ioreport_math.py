"""Arithmetic behind the macOS IOReport sampler, free of ctypes so it runs anywhere.

Three pieces, each tested on recorded fixtures:
- the GPU frequency table from the pmgr node's `voltage-states9` property,
- the residency-weighted GPU frequency from the "GPU Performance States"
  channel GPUPH,
- watts from an "Energy Model" energy delta and its unit label.

The MHz figure is the *requested* DVFS state weighted by the time spent in
each state while the GPU was active; it is not a measured clock.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

GPU_STATS_GROUP = "GPU Stats"
GPU_PSTATES_SUBGROUP = "GPU Performance States"
GPU_PSTATES_CHANNEL = "GPUPH"
ENERGY_GROUP = "Energy Model"
GPU_ENERGY_CHANNEL = "GPU Energy"

# States in which the GPU runs no work. They lead the residency table (which
# ones depends on the chip: OFF on most, IDLE/DOWN on some) and have no entry
# in the frequency table after its first one.
IDLE_STATE_NAMES = frozenset({"OFF", "IDLE", "DOWN"})

# Joules per count for each energy unit label IOReport uses.
ENERGY_UNIT_JOULES = {"mJ": 1e-3, "uJ": 1e-6, "µJ": 1e-6, "nJ": 1e-9}

# voltage-states9 stores Hz on every chip seen so far, but CPU tables moved to
# kHz on M4; a GPU clock in Hz is always above 1e7 and in kHz always below,
# so the magnitude tells the unit without a chip list.
_HZ_THRESHOLD = 1e7


@dataclass(frozen=True)
class ChannelSample:
    """One channel of an IOReport delta sample, copied out of CoreFoundation."""
    group: str
    subgroup: str
    channel: str
    unit: str = ""
    value: int | None = None                            # simple (integer) channels
    states: tuple[tuple[str, int], ...] | None = None   # state channels: (name, residency)


@dataclass(frozen=True)
class GpuSummary:
    mhz: float | None
    watts: float | None
    active: float | None       # share of the interval spent in non-idle states
    mhz_reason: str = ""
    power_note: str = ""


def parse_voltage_states(data: bytes) -> list[tuple[int, int]]:
    """(frequency, voltage) pairs: little-endian uint32 each, 8 bytes a state."""
    usable = len(data) - len(data) % 8    # a trailing partial entry carries nothing
    return [struct.unpack_from("<II", data, off) for off in range(0, usable, 8)]


def gpu_freqs_mhz(data: bytes) -> list[float]:
    """GPU DVFS frequencies in MHz, one per active performance state.

    The first entry is the off state (frequency 0); it is dropped so that the
    list lines up with the residency states after the idle ones.
    """
    freqs = [f for f, _volt in parse_voltage_states(data)][1:]
    if not freqs:
        return []
    scale = 1e-6 if max(freqs) >= _HZ_THRESHOLD else 1e-3
    return [f * scale for f in freqs]


def split_idle(states: Sequence[tuple[str, int]]) -> tuple[int, list[int]]:
    """(total idle residency, residencies of the active states in order)."""
    idle = 0
    active: list[int] = []
    for name, residency in states:
        if name.strip().upper() in IDLE_STATE_NAMES:
            idle += residency
        else:
            active.append(residency)
    return idle, active


def weighted_mhz(states: Sequence[tuple[str, int]],
                 freqs_mhz: Sequence[float]) -> tuple[float | None, float | None, str]:
    """(DVFS-weighted MHz, active share, reason) over one residency delta.

    A GPU that stayed idle the whole interval reports 0 MHz (it ran at no
    state), not n/a: the panel should show it asleep, not broken.
    """
    idle, active = split_idle(states)
    if not freqs_mhz:
        return None, None, "no GPU frequency table (voltage-states9)"
    if len(active) > len(freqs_mhz):
        return None, None, (f"{len(active)} active GPU states but only "
                            f"{len(freqs_mhz)} frequencies in voltage-states9")
    busy = sum(active)
    total = busy + idle
    if total <= 0:
        return None, None, "no residency recorded in the interval"
    if busy <= 0:
        return 0.0, 0.0, ""
    mhz = sum(r * f for r, f in zip(active, freqs_mhz)) / busy
    return mhz, busy / total, ""


def energy_joules(value: float, unit: str) -> float:
    """Convert an energy counter value to joules; raises ValueError on an unknown unit."""
    label = unit.strip()
    if label not in ENERGY_UNIT_JOULES:
        raise ValueError(f"unknown energy unit {unit!r}")
    return value * ENERGY_UNIT_JOULES[label]


def energy_watts(delta: float, unit: str, dt_s: float) -> float:
    """Average power over an interval from an energy delta."""
    if dt_s <= 0:
        raise ValueError(f"interval must be positive, got {dt_s}")
    return energy_joules(delta, unit) / dt_s


def summarize(channels: Sequence[ChannelSample], freqs_mhz: Sequence[float],
              dt_s: float) -> GpuSummary:
    """GPU MHz and watts from one delta sample of the subscribed channels."""
    mhz = active = watts = None
    mhz_reason = "GPUPH channel missing from the sample"
    power_note = "GPU Energy channel missing from the sample"
    for ch in channels:
        if _is_gpu_pstates(ch) and ch.states is not None:
            mhz, active, mhz_reason = weighted_mhz(ch.states, freqs_mhz)
        elif ch.group == ENERGY_GROUP and ch.channel == GPU_ENERGY_CHANNEL:
            watts, power_note = _gpu_watts(ch, dt_s)
    return GpuSummary(mhz=mhz, watts=watts, active=active,
                      mhz_reason=mhz_reason, power_note=power_note)


def _is_gpu_pstates(ch: ChannelSample) -> bool:
    return (ch.group == GPU_STATS_GROUP and ch.subgroup == GPU_PSTATES_SUBGROUP
            and ch.channel == GPU_PSTATES_CHANNEL)


def _gpu_watts(ch: ChannelSample, dt_s: float) -> tuple[float | None, str]:
    if ch.value is None:
        return None, "GPU Energy channel has no value"
    try:
        return energy_watts(ch.value, ch.unit, dt_s), f"energy delta ({ch.unit.strip()})"
    except ValueError as exc:
        return None, str(exc)
