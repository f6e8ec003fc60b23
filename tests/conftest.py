"""Shared test setup: Qt offscreen, and MLX streams cleared before the process exits."""
import atexit
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Equivalence tests compare float32 runs to 1e-4: keep float32 matmuls in full float32
# where MLX would otherwise use TF32-class units (CUDA tensor cores, M5 Macs).
os.environ.setdefault("MLX_ENABLE_TF32", "0")
sys.path.insert(0, str(Path(__file__).parent / "engine"))   # tiny_models, qwen_fixtures
sys.path.insert(0, str(Path(__file__).parent))              # float32_tolerance
# Same for MKL on the CPU: in strict reproducible mode a row's matmul result does not
# depend on how many rows share it (without it batched and alone differ by ~1.6e-4).
# Not the app's default: it makes single-row (decode B=1) matmuls 1.5-3x slower.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# Under pytest-xdist on a GPU machine (TANDEM_TEST_CACHE_PER_WORKER=1): one MLX kernel cache
# folder per worker. MLX writes a compiled kernel's file in place, not by a rename, so a worker
# reading a file another is still writing would load a truncated kernel. Set before mlx loads.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TANDEM_TEST_CACHE_PER_WORKER"):
    from engine.kernel_cache import worker_kernel_cache
    worker_kernel_cache(os.environ["PYTEST_XDIST_WORKER"])
# The optimized CPU BLAS must load before any test module imports mlx (engine/cpu_blas.py).
import engine.cpu_blas  # noqa: F401


@atexit.register
def _clear_mlx_streams():
    # MLX 0.32 aborts at exit unless every thread that used it clears its streams.
    if "mlx.core" in sys.modules:
        from engine.core.mlx_threads import clear_thread_streams
        clear_thread_streams()
