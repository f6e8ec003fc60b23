"""Refuse absurd sizes in a model's config before anything is built from them.

A config.json with hidden_size 10**9 or num_hidden_layers 10**9 (a typo, a broken
conversion, a hostile file) made the loader build a billion layers in Python (the
process ran until killed) or raise a bare OverflowError from MLX. The checks here
run on the parsed ModelArgs, before the model exists: each size against a ceiling far
above any released model's, then the parameters the config implies against the bytes
the weight files hold. Each error names the file and the field.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from engine.errors import ModelLoadError

# Ceilings, each well above the largest released model's (Llama 3.1 405B: hidden 16384,
# 126 layers, FFN 53248; Gemma 3: vocabulary 262144; DeepSeek V3: 256 experts).
CEILINGS = {
    "hidden_size": 1 << 17, "intermediate_size": 1 << 19, "moe_intermediate_size": 1 << 19,
    "shared_expert_intermediate_size": 1 << 19, "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10, "num_key_value_heads": 1 << 10,
    "linear_num_key_heads": 1 << 10, "linear_num_value_heads": 1 << 10, "head_dim": 1 << 12,
    "linear_key_head_dim": 1 << 12, "linear_value_head_dim": 1 << 12,
    "linear_conv_kernel_dim": 1 << 6, "vocab_size": 1 << 22, "num_experts": 1 << 14,
    "num_experts_per_tok": 1 << 10, "decoder_sparse_step": 1 << 10,
}
INT32_MAX = (1 << 31) - 1          # MLX shapes are int32: any other size field above it
# A weight takes at least 2 bits in any format MLX reads; the estimate below counts only
# the embedding and one hidden x hidden projection per layer, so it is a lower bound.
MIN_BYTES_PER_PARAM = 0.25


def check_config_sizes(config: dict, where: str) -> None:
    """The raw config's sizes (and its text_config's), before a family parses them: some
    build per-layer lists from num_hidden_layers while parsing."""
    text = config.get("text_config")
    for source in (config, text) if isinstance(text, dict) else (config,):
        for name, ceiling in CEILINGS.items():
            value = source.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > ceiling:
                raise _too_big(where, name, value, ceiling)


def check_sizes(args, where: str, weights_bytes: int | None) -> None:
    """args: a family's ModelArgs; where: the config's name in messages; weights_bytes:
    the weight files' total size (None: not known, e.g. weights built in memory)."""
    for f in fields(args):
        value = getattr(args, f.name)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        ceiling = CEILINGS.get(f.name, INT32_MAX)
        if value > ceiling:
            raise _too_big(where, f.name, value, ceiling)
    if weights_bytes:
        _check_against_weights(args, where, weights_bytes)


def _check_against_weights(args, where: str, weights_bytes: int) -> None:
    hidden = getattr(args, "hidden_size", 0) or 0
    layers = getattr(args, "num_hidden_layers", 0) or 0
    vocab = getattr(args, "vocab_size", 0) or 0
    least = vocab * hidden + layers * hidden * hidden
    if least * MIN_BYTES_PER_PARAM > 4 * weights_bytes:
        raise ModelLoadError(
            f"{where}: 'hidden_size' {hidden} with 'num_hidden_layers' {layers} and "
            f"'vocab_size' {vocab} means at least {least / 1e6:,.0f} million weights, but the "
            f"weight files hold only {weights_bytes / 2**20:.1f} MB; the config does not "
            "belong to these weights. Re-download the model.")


def _too_big(where: str, name: str, value: int, ceiling: int) -> ModelLoadError:
    return ModelLoadError(
        f"{where}: '{name}' is {value}, more than any model Tandem can run (at most "
        f"{ceiling}); the file is damaged or not this model's. Fix the value or "
        "re-download the model.")


def weight_files_bytes(where: Path) -> int | None:
    """Total bytes of a folder's .safetensors files, or of a .gguf file."""
    try:
        if where.is_file():
            return where.stat().st_size
        return sum(p.stat().st_size for p in where.glob("*.safetensors")) or None
    except OSError:
        return None
