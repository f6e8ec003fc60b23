"""Find, read and check model weights; build the model of the right family.

Reads MLX safetensors folders (quantized, with per-module overrides in
config.json's ``quantization``), Hugging Face safetensors folders
(quantized on load when asked) and GGUF files through ``mx.load``.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from engine.errors import ModelLoadError, UnsupportedModelError
from engine.loading import cpu_dense, gguf
from engine.loading.gguf_check import check_gguf
from engine.loading.model_check import check_path_kind
from engine.loading.safetensors_check import check_safetensors
from engine.loading.size_check import check_config_sizes, check_sizes, weight_files_bytes
from engine.loading.weight_check import check_weights
from engine.models.config_check import model_args

FAMILIES = ("engine.models.llama", "engine.models.qwen3_5")


@dataclass
class LoadedModel:
    model: nn.Module
    config: dict
    path: Path
    gguf_metadata: dict | None = None
    weights: cpu_dense.WeightsChoice | None = None   # dense or quantized (on the CPU)


def _family(model_type: str):
    for name in FAMILIES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if model_type in getattr(module, "MODEL_TYPES", ()):
            return module
    raise UnsupportedModelError(
        f"Model type '{model_type}' is not supported. Tandem runs Llama/SmolLM/Qwen2/Qwen3 "
        "dense models and the Qwen3.5/3.6 and Qwen3-Next hybrid models.")


def model_type_of(config: dict, where: str = "config.json") -> str:
    text = config.get("text_config", {})
    if not isinstance(text, dict):
        raise ModelLoadError(f"{where}: 'text_config' must be an object, got "
                             f"{type(text).__name__}; fix the file or re-download the model.")
    mt = config.get("model_type") or text.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise ModelLoadError(f"{where}: 'model_type' must name the architecture as a string "
                             f"(e.g. \"llama\"), got {mt!r}; fix the file or re-download "
                             "the model.")
    return mt.removesuffix("_text")


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelLoadError(f"{folder} has no config.json: choose a model folder "
                             "(MLX or Hugging Face safetensors) or a .gguf file.")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:    # ValueError: bad JSON or bad UTF-8
        raise ModelLoadError(f"{path} is not valid JSON ({e}); re-download the model.") from e
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path} holds a JSON {type(config).__name__}, not an object "
                             "with the model's settings; re-download the model.")
    return config


def read_safetensors(folder: Path) -> tuple[dict, dict]:
    """All tensors of the folder and, per tensor, the file it came from."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no .safetensors files; re-download the model.")
    weights, origin = {}, {}
    for f in files:
        check_safetensors(f)      # MLX trusts the header's length and offsets
        try:
            part = mx.load(str(f))
        except Exception as e:  # mlx raises RuntimeError/ValueError for short files
            raise ModelLoadError(f"Cannot read {f.name} ({e}): the file is truncated or "
                                 "damaged; re-download it.") from e
        weights.update(part)
        origin.update(dict.fromkeys(part, f.name))
    return weights, origin


def _quantize(model: nn.Module, weights: dict, qconfig: dict) -> None:
    """Quantize exactly the modules that have packed weights, with their own settings."""
    def predicate(path: str, module: nn.Module):
        if f"{path}.scales" not in weights:
            return False
        own = qconfig.get(path)
        if isinstance(own, dict):
            return {"group_size": own["group_size"], "bits": own["bits"]}
        return {"group_size": qconfig.get("group_size", 64), "bits": qconfig.get("bits", 4)}
    nn.quantize(model, class_predicate=predicate)


def build(config: dict, weights: dict, origin: dict, where: Path, qconfig: dict | None,
          quantize_bits: int | None = None) -> nn.Module:
    config_name = f"{where.name} (its metadata)" if where.is_file() else str(where / "config.json")
    check_config_sizes(config, config_name)
    module = _family(model_type_of(config, config_name))
    args = model_args(module.ModelArgs, config, config_name)
    check_sizes(args, config_name, weight_files_bytes(where))   # before anything is built
    model = module.Model(args)
    weights = model.sanitize(weights)
    origin = {**origin, **{k: origin.get(k, "the weights") for k in weights}}
    if qconfig:
        _quantize(model, weights, qconfig)
    check_weights(model, weights, origin, where)
    model.load_weights(list(weights.items()), strict=True)
    if quantize_bits and not qconfig:
        pred = getattr(module, "quantize_predicate", None)
        nn.quantize(model, group_size=64, bits=quantize_bits,
                    class_predicate=pred or (lambda p, m: hasattr(m, "to_quantized")
                                             and m.weight.shape[-1] % 64 == 0))
    mx.eval(model.parameters())
    return model


def load_model(path: str | Path, quantize_bits: int | None = None,
               cpu_weights: str = "auto") -> LoadedModel:
    """Load a model folder or a .gguf file. HF folders are quantized if quantize_bits is set.
    On the CPU backend, quantized weights become dense float32 when cpu_dense's rule (or
    cpu_weights) says so."""
    loaded = _load(Path(path).expanduser(), quantize_bits)
    loaded.weights = cpu_dense.apply(loaded.model, cpu_weights)
    return loaded


def _load(path: Path, quantize_bits: int | None) -> LoadedModel:
    if check_path_kind(path):
        return _load_gguf(path)
    config = read_config(path)
    check_config_sizes(config, str(path / "config.json"))
    weights, origin = read_safetensors(path)
    qconfig = config.get("quantization") or config.get("quantization_config")
    if qconfig and not isinstance(qconfig, dict):
        raise ModelLoadError(f"{path / 'config.json'}: 'quantization' must be an object "
                             f"like {{\"group_size\": 64, \"bits\": 4}}, got {qconfig!r}.")
    if qconfig and "bits" not in qconfig:   # an HF quantization_config (e.g. fp8): not ours
        raise UnsupportedModelError(f"{path}: this quantization format is not supported; "
                                    "use an MLX (mlx-community) or bf16 checkpoint.")
    model = build(config, weights, origin, path, qconfig, quantize_bits)
    return LoadedModel(model, config, path)


def _load_gguf(path: Path) -> LoadedModel:
    check_gguf(path)   # MLX's reader trusts the file's counts: a corrupt header is a SIGSEGV
    try:
        weights, meta = mx.load(str(path), return_metadata=True)
    except Exception as e:
        raise ModelLoadError(f"Cannot read {path.name} ({e}): the file is truncated or "
                             "uses a quantization MLX cannot read (Q4_0, Q4_1, Q8_0 work).") from e
    try:
        config = gguf.gguf_config(meta, weights, path.name)
    except (TypeError, ValueError) as e:      # a metadata value of the wrong type
        raise ModelLoadError(f"{path.name} has unusable metadata ({e}); download it again.") from e
    renamed = gguf.gguf_weights(weights, config)
    model = build(config, renamed, dict.fromkeys(renamed, path.name), path,
                  gguf.gguf_quantization(renamed))
    # GGUF keeps norms in float32, which carries float32 through every activation and
    # the KV pool. On a GPU run in float16 like the weights' scales; MLX's CPU backend
    # is many times slower in float16 (Paris test: 10 s -> 132 s), so it stays float32.
    if mx.default_device().type == mx.DeviceType.gpu:
        model.set_dtype(mx.float16)
        mx.eval(model.parameters())
    return LoadedModel(model, config, path, gguf_metadata=meta)
