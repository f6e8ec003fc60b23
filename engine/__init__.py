"""Tandem's in-process inference engine (mlx inside, never Qt).

The package's face is lazy: ``from engine import Engine`` loads mlx, but importing
``engine`` or its plain-data modules (events, sampling_params, errors, config,
handle, telemetry, the scheduler and cache bookkeeping) does not.
"""
from engine.cpu_blas import preload_cpu_blas

preload_cpu_blas()   # Linux: an optimized BLAS must be loaded before anything imports mlx

from importlib import import_module  # noqa: E402

from engine.kernel_cache import use_user_kernel_cache

use_user_kernel_cache()     # before anything imports mlx: its CUDA kernel cache folder

from engine.cuda_graph_cache import keep_serving_on_cache_misses  # noqa: E402

keep_serving_on_cache_misses()   # before MLX's CUDA encoder is made: no abort after 800 misses

_EXPORTS = {
    "Engine": "engine.core.engine", "EngineConfig": "engine.config",
    "SamplingParams": "engine.sampling_params", "RequestHandle": "engine.handle",
    "Completion": "engine.handle", "TandemError": "engine.errors",
    "ModelLoadError": "engine.errors", "PromptTooLongError": "engine.errors",
    "InvalidRequestError": "engine.errors",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value       # later lookups skip this function
    return value


def __dir__():
    return sorted([*globals(), *__all__])
