"""Full-size models with random quantized weights, for speed measurements only.

Speed does not depend on the values, except through routing, which they decide: a MoE
step reads every expert some row routes to. With zero-mean weights (_centre_quantized)
different tokens route as independent rows would (B=32 decode: ~162 of 256 experts a
layer against 163 expected; engine/bench/synthetic_routing.py counts it), near the
upper end of what a trained, load-balanced router reads. ``--model synthetic:NAME``
picks one; the bench builds it here and hands it to ``Engine.from_model``.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from engine.loading.model_bundle import InMemoryModel

SYNTHETIC_PREFIX = "synthetic:"

QWEN3_5_35B_A3B = {
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
        "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "norm_topk_prob": True,
        "vocab_size": 248320, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]},
    },
}
# The same architecture at toy size: checks the benchmark's code paths on a CPU.
QWEN3_5_TOY = {"model_type": "qwen3_5_moe", "text_config": {
    **QWEN3_5_35B_A3B["text_config"], "hidden_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32, "num_experts": 16, "num_experts_per_tok": 4,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "vocab_size": 1024}}
# The built-in model's shapes (SmolLM2-135M, Q4_1 GGUF = 4-bit, group 32), for the GPU
# machine, where the 98 MB file cannot travel: speed does not depend on the values.
SMOLLM2_135M = {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
                "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3,
                "head_dim": 64, "vocab_size": 49152, "rms_norm_eps": 1e-5,
                "rope_theta": 100000.0, "tie_word_embeddings": True,
                "quantization": {"group_size": 32, "bits": 4}}
SYNTHETIC = {"qwen3.5-35b-a3b": QWEN3_5_35B_A3B, "qwen3.5-toy": QWEN3_5_TOY,
             "smollm2-135m": SMOLLM2_135M}


def _random_like(name: str, p: mx.array) -> mx.array:
    """Random values of p's shape; bf16 like a shipped checkpoint (A_log stays fp32).
    Quantized biases are placeholders here: _centre_quantized sets them from the scales."""
    bf16 = mx.bfloat16
    if p.dtype == mx.uint32:                     # packed 4/8-bit weights: every bit random
        high = mx.random.randint(0, 2**16, p.shape).astype(mx.uint32)
        return (high << 16) | mx.random.randint(0, 2**16, p.shape).astype(mx.uint32)
    if name.endswith(".scales"):
        return mx.random.uniform(0.002, 0.004, p.shape).astype(bf16)
    if name.endswith(".biases"):
        return mx.zeros(p.shape, bf16)
    if "norm" in name:
        return mx.ones(p.shape, bf16)
    if name.endswith("A_log"):
        return mx.random.uniform(0.0, 2.0, p.shape)
    return (mx.random.normal(p.shape) * 0.02).astype(bf16)


def synthetic_model(name: str, seed: int = 0):
    """(model, config) of a named full-size architecture with random 4-bit weights."""
    if name not in SYNTHETIC:
        raise SystemExit(f"error: no synthetic model {name!r}; choose one of "
                         + ", ".join(SYNTHETIC_PREFIX + n for n in SYNTHETIC))
    config = SYNTHETIC[name]
    return synthetic_model_from_config(config, seed), config


def synthetic_in_memory(name: str, seed: int = 0) -> InMemoryModel:
    """The named synthetic model, ready for ``Engine.from_model`` (token-id prompts)."""
    model, config = synthetic_model(name, seed)
    return InMemoryModel(model, IdTokenizer(), config, f"{name} (random weights)")


def synthetic_model_from_config(config: dict, seed: int = 0):
    """A model of this config with random 4-bit weights (see _random_like)."""
    from engine.loading.loader import _family, model_type_of
    q = config.get("quantization", {})
    bits, group_size = q.get("bits", 4), q.get("group_size", 64)
    module = _family(model_type_of(config))
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_config(config))
    pred = getattr(module, "quantize_predicate", None) or (lambda p, m: hasattr(m, "to_quantized"))
    nn.quantize(model, group_size=group_size, bits=bits, class_predicate=pred)
    params = tree_flatten(model.parameters())
    fresh = []
    for i, (k, v) in enumerate(params):
        fresh.append((k, _random_like(k, v)))
        if i % 16 == 15:                         # keep the lazy graph and peak memory small
            mx.eval([a for _, a in fresh[-16:]])
    model.update(tree_unflatten(fresh))
    _centre_quantized(model)
    mx.eval(model.parameters())
    return model


def _centre_quantized(model) -> None:
    """Give every quantized weight a zero mean: bias = -scale * (2^bits - 1) / 2, the mean
    of a uniform random code. Why: a common offset in every weight (the old fixed bias
    left -0.0015 against a spread of 0.014) adds the same vector to every token's output;
    each layer amplifies it (a matrix of mean m has eigenvalue m * width along the ones
    vector), the Gated DeltaNet recurrence averages the rest away, and by the first
    router every token looks alike and picks the same experts (engine/bench/
    synthetic_routing.py counted 8-26 experts for 32 decode rows, not ~163)."""
    for _, module in model.named_modules():
        if getattr(module, "bits", None) and "biases" in module:
            half_range = (2 ** module.bits - 1) / 2
            module.biases = (module.scales.astype(mx.float32) * -half_range).astype(
                module.biases.dtype)
            mx.eval(module.biases)


class IdTokenizer:
    """Prompts are token ids; nothing is ever detokenized or stopped by EOS."""
    eos_token_ids: frozenset = frozenset()

    def encode_prompt(self, prompt):
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            raise ValueError("synthetic models take token-id prompts only")
        return prompt

    def detokenizer(self, skip_special_tokens: bool = False):
        return _SilentDetokenizer()


class _SilentDetokenizer:
    def add(self, token_id: int) -> str:
        return ""

    def flush(self) -> str:
        return ""
