"""Dense float32 weights for models that fit, on MLX's CPU backend.

MLX's CPU quantized matmul does not go through BLAS (about 2 GFLOP/s here), while a
dense float32 matmul does (tens of GFLOP/s with MKL, engine/cpu_blas.py). So on the
CPU a model is dequantized at load when its dense float32 weights take at most
``DENSE_RAM_FRACTION`` of the machine's memory; a bigger one keeps its quantized
weights (its memory, not its speed, is what limits it). On a GPU nothing changes.

The rule: dense float32 bytes of every weight <= RAM / 4. The built-in
SmolLM2-135M needs 0.54 GB dense, so any machine with 2.2 GB or more runs it dense;
an 8B model (32 GB dense) stays quantized on a 64 GB machine.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

DENSE_RAM_FRACTION = 0.25
CHOICES = ("auto", "dense", "quantized")


@dataclass(frozen=True)
class WeightsChoice:
    """How the model's weights are held, as the engine reports it."""
    mode: str              # "dense" | "quantized" | "as loaded" (GPU, or nothing quantized)
    reason: str            # why, in words the status panel and CLI show

    def as_dict(self) -> dict[str, str]:
        return {"mode": self.mode, "reason": self.reason}


def total_memory_bytes() -> int:
    """Physical memory (Linux and macOS); 0 when the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _quantized_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(path, m) for path, m in model.named_modules()
            if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))]


def dense_bytes(model: nn.Module) -> int:
    """Bytes of every parameter once the quantized layers are float32 [out, in]."""
    quantized = dict(_quantized_modules(model))
    total = 0
    for name, p in tree_flatten(model.parameters()):
        owner, _, leaf = name.rpartition(".")
        if owner not in quantized:
            total += p.size * 4
        elif leaf == "weight":          # packed [out, in * bits / 32] uint32 -> [out, in]
            total += p.size * 32 // quantized[owner].bits * 4
        # a quantized layer's scales and biases go away
    return total


def choose(model: nn.Module, setting: str = "auto",
           memory_bytes: int | None = None) -> WeightsChoice:
    """Decide dense or quantized for this model on this machine (no conversion)."""
    if setting not in CHOICES:
        raise ValueError(f"cpu_weights must be one of {CHOICES}, not {setting!r}")
    if mx.default_device().type != mx.DeviceType.cpu:
        return WeightsChoice("as loaded", "GPU backend: quantized weights run fast there")
    if not _quantized_modules(model):
        return WeightsChoice("as loaded", "the model has no quantized weights")
    if setting != "auto":
        return WeightsChoice(setting, f"CPU backend, {setting} by the cpu_weights setting")
    need = dense_bytes(model)
    ram = total_memory_bytes() if memory_bytes is None else memory_bytes
    limit = int(ram * DENSE_RAM_FRACTION)
    fits = ram > 0 and need <= limit
    rule = (f"dense float32 {need / 1e9:.2f} GB {'<=' if fits else '>'} "
            f"{DENSE_RAM_FRACTION:g} x RAM ({limit / 1e9:.1f} GB)")
    return WeightsChoice("dense" if fits else "quantized", f"CPU backend, {rule}")


def dequantize_model(model: nn.Module) -> int:
    """Replace every QuantizedLinear / QuantizedEmbedding by its float32 dense twin;
    returns how many modules were replaced."""
    return replace_modules(model, [(path, _dense(m)) for path, m in _quantized_modules(model)])


def replace_modules(model: nn.Module, replaced: list[tuple[str, nn.Module]]) -> int:
    """Put each (path, module) into `model` and evaluate its parameters now (at load, not
    in a first request); returns how many were replaced."""
    if replaced:
        model.update_modules(tree_unflatten(replaced))
        mx.eval(model.parameters())
    return len(replaced)


def _dense_weight(m: nn.Module) -> mx.array:
    """[out, in] float32. Scales and biases are widened first: dequantizing in their
    float16 would round every weight to float16, which the quantized matmul does not."""
    kwargs = {"mode": m.mode} if hasattr(m, "mode") else {}
    biases = m.get("biases")
    biases = None if biases is None else biases.astype(mx.float32)
    return mx.dequantize(m.weight, m.scales.astype(mx.float32), biases, m.group_size,
                         m.bits, **kwargs)


def _dense(m: nn.Module) -> nn.Module:
    bias = m.bias.astype(mx.float32) if "bias" in m else None
    return dense_twin(m, _dense_weight(m), bias)


def dense_twin(m: nn.Module, w: mx.array, bias: mx.array | None) -> nn.Module:
    """The plain module a quantized Linear or Embedding ``m`` stands for, holding the
    dequantized weight ``w`` [out, in] (and ``bias``, where ``m`` has one)."""
    if isinstance(m, nn.QuantizedEmbedding):
        dense = nn.Embedding(*w.shape)
        dense.weight = w
        return dense
    dense = nn.Linear(w.shape[1], w.shape[0], bias=bias is not None)
    dense.weight = w
    if bias is not None:
        dense.bias = bias
    return dense


def apply(model: nn.Module, setting: str = "auto") -> WeightsChoice:
    """The loader's entry: choose, and dequantize when the choice is dense."""
    choice = choose(model, setting)
    if choice.mode == "dense":
        dequantize_model(model)
    return choice
