"""Hardware telemetry (GPU/CPU MHz and watts) and Perfetto traces of the engine.

Nothing here imports Qt, and nothing imports mlx: samplers run on their own
thread, and the trace recorder only receives plain event objects.
"""
from engine.telemetry.gpu import Sampler, make_sampler
from engine.telemetry.monitor import TelemetryMonitor
from engine.telemetry.reading import Reading
from engine.telemetry.trace import TraceRecorder
from engine.telemetry.trace_check import validate_trace

__all__ = [
           "Reading",
           "Sampler",
           "TelemetryMonitor",
           "TraceRecorder",
           "make_sampler",
           "validate_trace",
]
