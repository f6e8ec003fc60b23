"""GGUF files through ``mx.load``: llama.cpp names and layouts to ours.

MLX reads Q4_0, Q4_1 and Q8_0 tensors natively as quantized weights
(``weight``/``scales``/``biases``, group size 32); everything else
arrives dequantized.
"""
from __future__ import annotations

import re

import mlx.core as mx

from engine.errors import ModelLoadError, UnsupportedModelError

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
              "output": "lm_head"}
_ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_REQUIRED = ("attention.head_count", "embedding_length", "block_count", "feed_forward_length")


def _meta_int(meta: dict, key: str, default=None):
    v = meta.get(key)
    return default if v is None else int(v.item() if hasattr(v, "item") else v)


def _meta_float(meta: dict, key: str, default=None):
    v = meta.get(key)
    return default if v is None else float(v.item() if hasattr(v, "item") else v)


def gguf_config(meta: dict, weights: dict, name: str = "This GGUF file") -> dict:
    """A config.json-style dict from GGUF metadata."""
    arch = str(meta.get("general.architecture", ""))
    if arch not in _ARCHS:
        raise UnsupportedModelError(
            f"GGUF architecture '{arch}' is not supported; Tandem reads llama, qwen2 and qwen3 "
            "GGUF files. Use an MLX or Hugging Face safetensors folder instead.")
    required = [f"{arch}.{k}" for k in _REQUIRED]
    missing = [k for k in required if _meta_int(meta, k) is None]
    if missing or "token_embd.weight" not in weights:
        what = f"metadata key '{missing[0]}'" if missing else "tensor 'token_embd.weight'"
        raise ModelLoadError(f"{name} has no {what}; it is incomplete or not a language "
                             "model. Download it again or choose another file.")
    heads = _meta_int(meta, f"{arch}.attention.head_count")
    hidden = _meta_int(meta, f"{arch}.embedding_length")
    vocab = weights["token_embd.weight"].shape[0]
    return {
        "model_type": _ARCHS[arch], "hidden_size": hidden,
        "num_hidden_layers": _meta_int(meta, f"{arch}.block_count"),
        "intermediate_size": _meta_int(meta, f"{arch}.feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": _meta_int(meta, f"{arch}.attention.head_count_kv", heads),
        "head_dim": _meta_int(meta, f"{arch}.attention.key_length", hidden // heads),
        "vocab_size": vocab,
        "rms_norm_eps": _meta_float(meta, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": _meta_float(meta, f"{arch}.rope.freq_base", 10000.0),
        "attention_bias": "blk.0.attn_q.bias" in weights,
        "tie_word_embeddings": "output.weight" not in weights,
        "max_position_embeddings": _meta_int(meta, f"{arch}.context_length", 4096),
    }


def _unpermute(w: mx.array, n_heads: int) -> mx.array:
    """Undo llama.cpp's Q/K row permutation (interleaved rope → half-split rope).

    Rows are output features, so the same permutation applies to packed
    quantized weights, their scales and biases.
    """
    rows = w.shape[0]
    return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_weights(weights: dict, config: dict) -> dict:
    """Rename llama.cpp tensors and undo the Q/K permutation (llama only)."""
    out = {}
    permute = config["model_type"] == "llama"
    for name, w in weights.items():
        m = re.match(r"blk\.(\d+)\.(\w+)\.(weight|scales|biases|bias)$", name)
        if m:
            layer, kind, part = m.groups()
            if kind not in _LAYER_NAMES:
                continue
            if permute and kind in ("attn_q", "attn_k"):
                heads = config["num_attention_heads"] if kind == "attn_q" \
                    else config["num_key_value_heads"]
                w = _unpermute(w, heads)
            out[f"model.layers.{layer}.{_LAYER_NAMES[kind]}.{part}"] = w
            continue
        base, _, part = name.rpartition(".")
        if base in _TOP_NAMES:
            out[f"{_TOP_NAMES[base]}.{part}"] = w
    return out


def gguf_quantization(weights: dict) -> dict:
    """Per-module {group_size, bits} for every tensor MLX loaded quantized."""
    q = {}
    for name, scales in weights.items():
        if name.endswith(".scales"):
            base = name[: -len(".scales")]
            packed = weights[f"{base}.weight"]
            q[base] = {"group_size": 32, "bits": packed.shape[-1] // scales.shape[-1]}
    return q
