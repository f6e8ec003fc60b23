"""Hardware telemetry (GPU/CPU MHz and watts) and Perfetto traces of the engine.

Nothing here imports Qt, and nothing imports mlx: samplers run on their own
thread, and the trace recorder only receives plain event objects.

Status panel (readings arrive on the monitor thread; re-emit as a signal):

    monitor = TelemetryMonitor(interval_s=0.5)        # make_sampler() picks the source
    monitor.add_listener(bridge.on_reading)
    monitor.start()
    r = monitor.latest()        # r.mhz_text "1398 MHz" | "n/a", r.watts_text, r.tooltip,
                                # r.mhz_label "DVFS-weighted MHz", r.source "IOReport"
    monitor.history(60)         # sparkline data, oldest first
    monitor.stop()

Record a trace (events plus readings; recording.py does the wiring once):

    rec = record_engine(engine, path)   # own monitor; path is a valid trace from now on
    rec.finish()                        # final save, monitor stopped, listeners removed

    rec = TraceRecording(bridge.add_engine_listener, monitor)   # app: shared monitor
    rec.start(path); rec.stop(); rec.save(other_path)            # toggle, export a copy
"""
from engine.telemetry.gpu import Sampler, make_sampler
from engine.telemetry.monitor import TelemetryMonitor
from engine.telemetry.reading import Reading
from engine.telemetry.recording import TraceRecording, record_engine
from engine.telemetry.trace import TraceRecorder
from engine.telemetry.trace_check import validate_trace

__all__ = ["Reading", "Sampler", "TelemetryMonitor", "TraceRecorder", "TraceRecording",
           "make_sampler", "record_engine", "validate_trace"]
