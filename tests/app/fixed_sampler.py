"""A telemetry sampler with a fixed answer, for the status panel and trace tests."""
from __future__ import annotations

import time

from engine.telemetry import Reading


class FixedSampler:
    source = "NVML"
    mhz_label = "SM clock MHz"

    def __init__(self, mhz=1398.0, watts=12.5):
        self.mhz, self.watts = mhz, watts

    def read(self) -> Reading:
        return Reading(t=time.perf_counter(), gpu_mhz=self.mhz, gpu_watts=self.watts,
                       mhz_label=self.mhz_label, source=self.source,
                       power_note="energy counter delta")

    def close(self) -> None:
        pass


def fixed_monitor(**kwargs):
    """A TelemetryMonitor that is not started: tests call sample_once()."""
    from engine.telemetry import TelemetryMonitor
    return TelemetryMonitor(interval_s=0.5, sampler=FixedSampler(**kwargs))
