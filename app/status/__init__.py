"""The status panel: live tok/s, batch, memory, GPU/CPU clock and power, sparklines;
the telemetry monitor's setup and the Record-trace toggle (wired through
engine/telemetry/recording.py)."""
