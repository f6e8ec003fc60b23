"""Tiny random Llama-family models written as MLX folders, for engine and app tests."""
from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from qwen_fixtures import build_model, random_weights, tiny_config, write_tokenizer

from engine.models import llama

VOCAB = 320


def tiny_llama_config(model_type: str = "llama", **over) -> dict:
    return {"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2,
            "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": model_type != "qwen2", **over}


def tiny_model(kind: str, qwen_seed: int = 0, llama_layers: int = 2):
    """A tiny random model of a family the engine runs: "llama" (tiny_llama's, of
    llama_layers layers), or a Qwen3.5 / Qwen3-Next type of qwen_fixtures.tiny_config
    (random weights of qwen_seed), the MoE one with its projections joined as shipped."""
    if kind == "llama":
        return tiny_llama(tiny_llama_config(num_hidden_layers=llama_layers))
    config = tiny_config(kind)
    model = build_model(config, random_weights(config, seed=qwen_seed))
    if kind == "qwen3_5_moe":
        model.fuse_projections()
    return model


def tiny_llama(config: dict | None = None, seed: int = 0) -> llama.Model:
    """A float32 model with random weights scaled so logits are not flat."""
    config = config or tiny_llama_config()
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_config(config))
    params = [(k, mx.random.normal(v.shape) * (1.0 if "norm" in k else 0.2))
              for k, v in tree_flatten(model.parameters())]
    params = [(k, 1.0 + 0.1 * v if "norm" in k else v) for k, v in params]
    model.load_weights(params)
    mx.eval(model.parameters())
    return model


def write_tiny_llama(folder: str | Path, quantized: bool = False, seed: int = 0,
                     config: dict | None = None) -> Path:
    """An MLX folder (config.json, model.safetensors, tokenizer) of a tiny Llama."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(config or tiny_llama_config())
    model = tiny_llama(config, seed)
    if quantized:
        nn.quantize(model, group_size=32, bits=4)
        config["quantization"] = {"group_size": 32, "bits": 4}
    mx.save_safetensors(str(folder / "model.safetensors"),
                        dict(tree_flatten(model.parameters())), metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config))
    write_tokenizer(folder)
    return folder
