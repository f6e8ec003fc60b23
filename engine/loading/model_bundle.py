"""A loaded model with its tokenizer, ready for the engine thread."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import EngineConfig
from engine.cpu_blas import blas_info
from engine.events import LoadProgress
from engine.kernel_cache import selftest_verdict_dir
from engine.loading import cpu_dense, cpu_layout, cuda_qmm_guard
from engine.loading.default_model import default_model_path
from engine.loading.grouped_tune import tune_experts_paths
from engine.loading.loader import load_model
from engine.loading.mlx_prewarm import Prewarm
from engine.models.base import fuse_projections, use_kernels
from engine.tokenization.tokenizer import Tokenizer
from kernels import NO_KERNELS, KernelSet, gpu_backend, select_kernels
from kernels.kernel_seeding import SEEDER


@dataclass
class ModelBundle:
    model: object
    tokenizer: Tokenizer
    config: dict
    path: Path
    name: str
    kernels: KernelSet = NO_KERNELS      # the model's own, chosen at load (use_kernels)

    @property
    def kernel_status(self) -> dict[str, str]:
        """name -> "cuda" | "metal" | "reference (why)", for the status panel."""
        return self.kernels.status()
    weights: dict = field(default_factory=dict)   # cpu_dense.WeightsChoice.as_dict()
    blas: dict = field(default_factory=lambda: blas_info().as_dict())   # CPU matmuls
    experts_note: str = ""     # what the experts paths' measure at load found (grouped_tune.py)
    prewarm_note: str = ""     # MLX's kernels compiled in workers at load (mlx_prewarm.py)


@dataclass(frozen=True)
class InMemoryModel:
    """A model its caller built (a benchmark's random weights, a tool): served as it is.

    model: a model-family ``Model`` with its weights loaded; tokenizer: anything with
    ``encode_prompt``, ``detokenizer`` and ``eos_token_ids`` like ``Tokenizer``;
    config: the model's config.json contents; name: what the app and logs call it.
    The engine prepares the model as one read from disk (joins its projections, gives
    it a kernel set): hand it over, do not keep using it elsewhere.
    """
    model: object
    tokenizer: object
    config: dict
    name: str

    def __post_init__(self):
        if not isinstance(self.config, dict):
            raise TypeError("InMemoryModel.config must be the model's config dict")
        if not self.name:
            raise ValueError("InMemoryModel.name must not be empty")


def load_bundle(model: str | Path | InMemoryModel | None, config: EngineConfig,
                on_progress: Callable[[LoadProgress], None] | None = None,
                quantize_bits: int | None = None) -> ModelBundle:
    """Runs on the engine thread: weights, tokenizer, projections joined, kernel self-test.
    Reports progress up to 0.88; the engine reports the warm-up and "Ready" after it."""
    report = on_progress or (lambda p: None)
    start_kernel_seeding()
    if isinstance(model, InMemoryModel):
        return _in_memory_bundle(model, config, report)
    path = Path(model).expanduser() if model is not None else default_model_path()
    report(LoadProgress(0.05, f"Reading {path.name}"))
    loaded = load_model(path, quantize_bits=quantize_bits, cpu_weights=config.cpu_weights)
    report(LoadProgress(0.8, "Reading the tokenizer"))
    if loaded.gguf_metadata is not None:
        tokenizer = Tokenizer.from_gguf(loaded.gguf_metadata)
    else:
        tokenizer = Tokenizer.from_folder(path)
    report(LoadProgress(0.85, "Joining projections"))
    fuse_projections(loaded.model)
    cuda_qmm_guard.apply(loaded.model)     # CUDA: no one-group quantized matmul (tiny models)
    cpu_layout.arrange(loaded.model)       # after joining: the joined weights' layout
    report(LoadProgress(0.88, "Checking kernels"))
    kernels, note, prewarmed = _give_kernels(loaded.model, config, report)
    name = path.stem if path.is_file() else path.name
    return ModelBundle(loaded.model, tokenizer, loaded.config, path, name, kernels,
                       loaded.weights.as_dict(), experts_note=note, prewarm_note=prewarmed)


def _in_memory_bundle(m: InMemoryModel, config: EngineConfig,
                      report: Callable[[LoadProgress], None]) -> ModelBundle:
    """Nothing to read: the CPU weights rule, projections joined and the kernel
    self-test, as from disk."""
    weights = cpu_dense.apply(m.model, config.cpu_weights)
    fuse_projections(m.model)
    cuda_qmm_guard.apply(m.model)
    cpu_layout.arrange(m.model)
    report(LoadProgress(0.88, "Checking kernels"))
    kernels, note, prewarmed = _give_kernels(m.model, config, report)
    return ModelBundle(m.model, m.tokenizer, m.config, Path(m.name), m.name, kernels,
                       weights.as_dict(), experts_note=note, prewarm_note=prewarmed)


def start_kernel_seeding() -> None:
    """CUDA: the canary of kernels/kernel_seeding.py compiles while the weights are read."""
    if gpu_backend() == "cuda":
        SEEDER.start()


def _give_kernels(model, config: EngineConfig,
                  report: Callable[[LoadProgress], None]) -> tuple[KernelSet, str, str]:
    """Self-test the kernels here (unless turned off) and give the model the ones that
    passed: its own set, so another engine in this process cannot change it. On CUDA,
    also which kernels beat the model's own path at a prompt chunk's experts (grouped_tune.py).
    MLX's own kernels for the model's matmuls compile in workers meanwhile (mlx_prewarm.py):
    the experts' measure and the warm-up after it meet them."""
    prewarm = Prewarm()
    prewarm.start(model, max(config.prefill_chunk, config.max_num_seqs), gpu_backend())
    SEEDER.check()          # CUDA: from here on, kernels met are compiled in workers too
    kernels = select_kernels(config.use_kernels, selftest_verdict_dir())
    use_kernels(model, kernels)
    prewarmed = prewarm.wait()
    tuned, note = tune_experts_paths(
        model, kernels, lambda: report(LoadProgress(0.89, "Measuring the experts kernels")))
    if tuned is not kernels:
        use_kernels(model, tuned)
    return tuned, note, prewarmed
