"""A loaded model with its tokenizer, ready for the engine thread."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import EngineConfig
from engine.cpu_blas import blas_info
from engine.events import LoadProgress
from engine.loading.default_model import default_model_path
from engine.loading.loader import load_model
from engine.tokenization.tokenizer import Tokenizer


@dataclass
class ModelBundle:
    model: object
    tokenizer: Tokenizer
    config: dict
    path: Path
    name: str
    kernel_status: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)   # cpu_dense.WeightsChoice.as_dict()
    blas: dict = field(default_factory=lambda: blas_info().as_dict())   # CPU matmuls


def load_bundle(model: str | Path | None, config: EngineConfig,
                on_progress: Callable[[LoadProgress], None] | None = None,
                quantize_bits: int | None = None) -> ModelBundle:
    """Runs on the engine thread: weights, tokenizer, kernel self-test."""
    report = on_progress or (lambda p: None)
    if isinstance(model, str) and model.startswith(SYNTHETIC_PREFIX):
        return _synthetic_bundle(model.removeprefix(SYNTHETIC_PREFIX), config)
    path = Path(model).expanduser() if model is not None else default_model_path()
    report(LoadProgress(0.05, f"Reading {path.name}"))
    loaded = load_model(path, quantize_bits=quantize_bits, cpu_weights=config.cpu_weights)
    report(LoadProgress(0.8, "Reading the tokenizer"))
    if loaded.gguf_metadata is not None:
        tokenizer = Tokenizer.from_gguf(loaded.gguf_metadata)
    else:
        tokenizer = Tokenizer.from_folder(path)
    report(LoadProgress(0.9, "Checking kernels"))
    status = _kernel_selftest(config)
    report(LoadProgress(1.0, "Ready"))
    name = path.stem if path.is_file() else path.name
    return ModelBundle(loaded.model, tokenizer, loaded.config, path, name, status,
                       loaded.weights.as_dict())


SYNTHETIC_PREFIX = "synthetic:"


def _synthetic_bundle(name: str, config: EngineConfig) -> ModelBundle:
    """A full-size architecture with random 4-bit weights (benchmarks only)."""
    from engine.bench_synthetic import IdTokenizer, synthetic_model
    from engine.loading import cpu_dense
    model, cfg = synthetic_model(name)
    weights = cpu_dense.apply(model, config.cpu_weights)
    return ModelBundle(model, IdTokenizer(), cfg, Path(name), f"{name} (random weights)",
                       _kernel_selftest(config), weights.as_dict())


def _kernel_selftest(config: EngineConfig) -> dict:
    """Run the kernels' self-test; failing kernels are disabled (reference path used)."""
    if not config.use_kernels:
        try:
            from kernels.registry import NAMES, disable
        except ImportError:
            return {}
        for name in NAMES:
            disable(name, "turned off in settings")
        return {name: "reference (turned off in settings)" for name in NAMES}
    try:
        from kernels import enable, enabled, run_selftest
        from kernels.registry import NAMES
    except ImportError:
        return {}
    for name in NAMES:     # a previous engine in this process may have turned them off
        enable(name)
    run_selftest(verbose=False)
    return enabled()      # name -> "cuda" | "metal" | "reference (why)"
