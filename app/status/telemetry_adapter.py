"""Builds the engine's telemetry monitor (GPU MHz and watts, or the CPU clock
where there is no GPU sampler) for the window; the app runs without it if it
fails."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def make_telemetry(interval_s: float = 0.5):
    """A started TelemetryMonitor, or None if telemetry is unavailable."""
    try:
        from engine.telemetry import TelemetryMonitor
    except ImportError as exc:
        log.warning("telemetry unavailable: %s", exc)
        return None
    monitor = TelemetryMonitor(interval_s=interval_s)
    try:
        monitor.start()
    except Exception as exc:  # noqa: BLE001 - a broken sampler must not stop the app
        log.warning("telemetry monitor failed to start: %s", exc)
        return None
    return monitor
