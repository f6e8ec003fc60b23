"""One trace recording: a TraceRecorder fed by an engine's events and by a
telemetry monitor's readings. Used by the CLI (`generate --trace`), the bench
and the app's Record-trace toggle, so the wiring is written once.

    rec = record_engine(engine, "run.json")    # own monitor; recording from now on
    ...
    rec.finish()                                # stop both; the trace is at run.json
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from engine.telemetry.monitor import TelemetryMonitor
from engine.telemetry.trace import TraceRecorder

DEFAULT_INTERVAL_S = 0.25     # readings per trace: enough to see clocks settle per step burst


class TraceRecording:
    """Wires `recorder` to an event source and (optionally) a monitor.

    `add_event_listener` is `engine.add_listener`, or the app bridge's
    `add_engine_listener` (which re-attaches it to every engine it loads).
    A monitor passed in is shared (the status panel's) and left running;
    one made by `record_engine` is owned and stopped by `finish`.
    """

    def __init__(self, add_event_listener: Callable, monitor: TelemetryMonitor | None = None,
                 recorder: TraceRecorder | None = None,
                 remove_event_listener: Callable | None = None, owns_monitor: bool = False):
        self.recorder = recorder or TraceRecorder()
        self.monitor = monitor
        self._owns_monitor = owns_monitor
        self._remove_event_listener = remove_event_listener
        # Bound once: engines remove listeners by identity, and each attribute access
        # makes a new bound-method object.
        self._on_event, self._on_reading = self.recorder.on_event, self.recorder.on_reading
        add_event_listener(self._on_event)
        if monitor is not None:
            monitor.add_listener(self._on_reading)

    @property
    def is_recording(self) -> bool:
        return self.recorder.is_recording

    def start(self, path: str | os.PathLike | None = None) -> None:
        """Record from now on; with `path`, the file is a valid trace while recording."""
        if self._owns_monitor and not self.monitor.is_running:
            self.monitor.start()
        self.recorder.start(path)

    def stop(self) -> Path | None:
        """End the recording (final save where it streams); the monitor stays wired."""
        return self.recorder.stop() if self.recorder.is_recording else None

    def save(self, path: str | os.PathLike) -> Path:
        """Export what was recorded (in progress or stopped) to `path`."""
        return self.recorder.save(path)

    def finish(self) -> Path | None:
        """Stop recording, detach from the monitor and the engine, stop an owned monitor."""
        path = self.stop()
        if self.monitor is not None:
            self.monitor.remove_listener(self._on_reading)
            if self._owns_monitor:
                self.monitor.stop()
        if self._remove_event_listener is not None:
            self._remove_event_listener(self._on_event)
        return path


def record_engine(engine, path: str | os.PathLike | None = None,
                  interval_s: float = DEFAULT_INTERVAL_S,
                  monitor: TelemetryMonitor | None = None) -> TraceRecording:
    """Start recording `engine`'s events plus clock/power readings (a monitor of its own
    unless one is given); `finish()` ends it and returns the trace's path."""
    owned = monitor is None
    rec = TraceRecording(engine.add_listener, monitor or TelemetryMonitor(interval_s=interval_s),
                         remove_event_listener=engine.remove_listener, owns_monitor=owned)
    rec.start(path)
    return rec
