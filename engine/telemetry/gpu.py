"""The sampler interface and the choice of the best sampler for this machine.

A sampler is read from the monitor's own thread, never the engine thread, so
none of them may touch mlx. Each `read()` returns a complete `Reading`; a
sampler that cannot measure something says why in the reading instead of
raising, so the status panel always has a line to show.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Protocol, runtime_checkable

from engine.telemetry.reading import Reading

log = logging.getLogger(__name__)


@runtime_checkable
class Sampler(Protocol):
    source: str       # "IOReport", "NVML", "cpufreq", ...
    mhz_label: str    # what the MHz number means

    def read(self) -> Reading:
        """Sample now. Delta-based samplers measure since the previous call."""
        ...

    def close(self) -> None:
        """Release OS handles; read() is not called afterwards."""
        ...


class NullSampler:
    """Reports n/a with a fixed reason; the last resort of make_sampler()."""
    source = "none"
    mhz_label = "GPU MHz"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def read(self) -> Reading:
        return Reading.unavailable(time.perf_counter(), self.source, self.reason)

    def close(self) -> None:
        pass


def make_sampler(prefer: str | None = None) -> Sampler:
    """The most precise sampler this machine supports.

    prefer: "ioreport", "nvml" or "cpu" to force one (for tests and bug
    reports); a forced sampler that fails still degrades to the CPU sampler.
    Reasons why better samplers were skipped travel in the readings'
    power_note, so the panel can say "no GPU power: NVML not installed".
    """
    reasons: list[str] = []
    for name in _candidates(prefer):
        sampler = _try(name, reasons)
        if sampler is not None:
            if reasons and hasattr(sampler, "skipped"):
                sampler.skipped = "; ".join(reasons)
            return sampler
    return NullSampler("; ".join(reasons) or "no sampler available")


def _candidates(prefer: str | None) -> list[str]:
    if prefer is not None:
        if prefer not in ("ioreport", "nvml", "cpu"):
            raise ValueError(f"unknown sampler {prefer!r}; use ioreport, nvml or cpu")
        return [prefer] if prefer == "cpu" else [prefer, "cpu"]
    if sys.platform == "darwin":
        return ["ioreport", "cpu"]
    return ["nvml", "cpu"]


def _try(name: str, reasons: list[str]) -> Sampler | None:
    # Imports are local: IOReport's ctypes bindings must only load on macOS,
    # and pynvml is optional.
    try:
        if name == "ioreport":
            from engine.telemetry.ioreport import IOReportSampler
            return IOReportSampler()
        if name == "nvml":
            from engine.telemetry.nvml import NvmlSampler
            return NvmlSampler()
        from engine.telemetry.cpu import CpuSampler
        return CpuSampler()
    except Exception as exc:  # noqa: BLE001 -- any failure means "try the next one"
        log.info("telemetry sampler %s unavailable: %s", name, exc)
        reasons.append(f"{name}: {exc}")
        return None
