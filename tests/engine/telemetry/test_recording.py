"""engine/telemetry/recording.py: one wiring of events plus readings into a trace,
used by `python -m engine generate --trace` and the app."""
from __future__ import annotations

import json

from test_telemetry_monitor import ScriptedSampler
from tiny_models import write_tiny_llama

from engine.__main__ import main
from engine.telemetry import TelemetryMonitor, TraceRecording, record_engine, validate_trace


class EventSource:
    """The engine's listener API (add/remove by identity, as Engine does)."""

    def __init__(self):
        self.listeners = []

    def add_listener(self, fn):
        self.listeners = [*self.listeners, fn]

    def remove_listener(self, fn):
        self.listeners = [f for f in self.listeners if f is not fn]

    def emit(self, ev):
        for fn in self.listeners:
            fn(ev)


def test_record_engine_wires_events_and_readings_then_detaches(tmp_path):
    source = EventSource()
    monitor = TelemetryMonitor(sampler=ScriptedSampler([900.0]))
    rec = record_engine(source, tmp_path / "t.json", monitor=monitor)
    assert rec.is_recording and len(source.listeners) == 1
    monitor.sample_once()
    path = rec.finish()
    assert path == tmp_path / "t.json" and not rec.is_recording
    assert source.listeners == []                    # detached from the engine
    monitor.sample_once()                            # after finish: not recorded
    counters = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "C"]
    assert 900.0 in {e["args"]["value"] for e in counters}       # the one reading, once
    assert sum(e["args"]["value"] == 900.0 for e in counters) == 1


def test_shared_monitor_is_left_running_and_owned_one_is_stopped(tmp_path):
    shared = TelemetryMonitor(sampler=ScriptedSampler([1.0]), interval_s=10)
    shared.start()
    try:
        rec = TraceRecording(EventSource().add_listener, shared)
        rec.start(tmp_path / "a.json")
        rec.finish()
        assert shared.is_running
    finally:
        shared.stop()
    owned = record_engine(EventSource(), tmp_path / "b.json", interval_s=10)
    assert owned.monitor.is_running
    owned.finish()
    assert not owned.monitor.is_running


def test_cli_generate_writes_a_valid_trace(tmp_path, capsys):
    folder = write_tiny_llama(tmp_path / "llama")
    path = tmp_path / "run.json"
    assert main(["generate", "--model", str(folder), "--prompt", "hello", "--prompt", "bye",
                 "--max-tokens", "4", "--trace", str(path)]) == 0
    trace = json.loads(path.read_text())
    assert validate_trace(trace) == []
    assert any(e.get("name") == "decode_step" for e in trace["traceEvents"])
    assert f"trace written to {path}" in capsys.readouterr().err
