"""One hardware telemetry reading: GPU (or CPU) frequency and power, with provenance.

Plain data, safe to hand across threads. Every number carries what it means
(`mhz_label`) and where it came from (`source`), because the numbers from
different platforms are not the same quantity: IOReport's is the requested
DVFS state weighted by residency, NVML's is the measured SM clock, and the
fallback is a CPU clock.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NOT_AVAILABLE = "n/a"


@dataclass(frozen=True)
class Reading:
    t: float                        # time.perf_counter() seconds at the end of the sample
    gpu_mhz: float | None           # None when unavailable; see `reason`
    gpu_watts: float | None         # None when unavailable; see `power_note`
    mhz_label: str                  # "DVFS-weighted MHz", "SM clock MHz", "CPU MHz"
    source: str                     # "IOReport", "NVML", "cpufreq", "procfs", "sysctl", "none"
    power_note: str = ""            # how watts were obtained, or why they are n/a
    reason: str = ""                # why gpu_mhz is n/a (empty when it is a number)
    gpu_active: float | None = None  # fraction of the interval the GPU was not idle/off

    def __post_init__(self) -> None:
        # A NaN would poison sparklines and is invalid JSON in the trace.
        for name in ("gpu_mhz", "gpu_watts", "gpu_active"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"Reading.{name} must be finite or None, got {value!r}")

    @property
    def mhz_text(self) -> str:
        """'1398 MHz' or 'n/a' for the status panel."""
        return NOT_AVAILABLE if self.gpu_mhz is None else f"{self.gpu_mhz:.0f} MHz"

    @property
    def watts_text(self) -> str:
        """'12.3 W' or 'n/a' for the status panel."""
        return NOT_AVAILABLE if self.gpu_watts is None else f"{self.gpu_watts:.1f} W"

    @property
    def tooltip(self) -> str:
        """What the numbers mean and where they came from, for a hover text."""
        parts = [f"{self.mhz_label} from {self.source}"]
        if self.reason:
            parts.append(f"MHz n/a: {self.reason}")
        if self.power_note:
            parts.append(f"power: {self.power_note}")
        return "; ".join(parts)

    @classmethod
    def unavailable(cls, t: float, source: str, reason: str,
                    mhz_label: str = "GPU MHz") -> Reading:
        """A reading that says why there is nothing to show."""
        return cls(t=t, gpu_mhz=None, gpu_watts=None, mhz_label=mhz_label,
                   source=source, power_note=reason, reason=reason)
