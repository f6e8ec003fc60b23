"""The status panel: live tok/s, batch, memory, GPU figures, sparklines, trace recording."""
