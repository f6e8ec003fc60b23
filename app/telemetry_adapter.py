"""Builds the engine's telemetry monitor (GPU MHz and watts) and trace
recorder for the window; the app runs without them if they fail."""
from __future__ import annotations

import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)


def default_trace_path(folder: Path) -> Path:
    return Path(folder) / "traces" / time.strftime("tandem-trace-%Y%m%d-%H%M%S.json")


def make_telemetry(trace_path: str | None, folder: Path):
    """(monitor or None, recorder or None); the recorder writes to trace_path or
    a timestamped file in the data folder's traces/."""
    try:
        from engine.telemetry import TelemetryMonitor
        from engine.telemetry.trace import TraceRecorder
    except ImportError as exc:
        log.warning("telemetry unavailable: %s", exc)
        return None, None
    monitor = TelemetryMonitor(interval_s=0.5)
    try:
        monitor.start()
    except Exception as exc:  # noqa: BLE001 - a broken sampler must not stop the app
        log.warning("telemetry monitor failed to start: %s", exc)
        monitor = None
    path = Path(trace_path).expanduser() if trace_path else default_trace_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    recorder = TraceRecorder(path)
    if monitor is not None:
        monitor.add_listener(recorder.on_reading)
    return monitor, recorder
