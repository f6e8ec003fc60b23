"""Tandem's in-process inference engine (imports mlx, never Qt)."""
from engine.cpu_blas import preload_cpu_blas

preload_cpu_blas()   # Linux: an optimized BLAS must be loaded before anything imports mlx
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.errors import ModelLoadError, PromptTooLongError, TandemError
from engine.handle import Completion, RequestHandle
from engine.sampling_params import SamplingParams

__all__ = ["Engine", "EngineConfig", "SamplingParams", "RequestHandle", "Completion",
           "TandemError", "ModelLoadError", "PromptTooLongError"]
