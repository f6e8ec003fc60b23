"""Shared test setup: Qt offscreen, and MLX streams cleared before the process exits."""
import atexit
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).parent / "engine"))   # tiny_models, qwen_fixtures


@atexit.register
def _clear_mlx_streams():
    # MLX 0.32 aborts at exit unless every thread that used it clears its streams.
    if "mlx.core" in sys.modules:
        from engine.mlx_threads import clear_thread_streams
        clear_thread_streams()
