"""Tiny Qwen3.5 / Qwen3-Next models for tests: configs, weights, folders, batch views.

``Rows`` is a stand-in for the runner (no engine needed): a trivial page
allocator, one state slot per sequence, and a BatchView built per forward.
"""
from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from engine.core.batch_view import BatchView
from engine.models.base import ModelCache
from engine.models.qwen3_5 import Model, ModelArgs, quantize_predicate

_ROPE = {"type": "default", "mrope_section": [1, 1, 0], "rope_theta": 10000.0,
         "partial_rotary_factor": 0.25}
_LINEAR = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
           "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4}
_MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64, "decoder_sparse_step": 1,
        "norm_topk_prob": True}


def tiny_config(model_type: str = "qwen3_5_moe") -> dict:
    """A shipped-looking config.json: Qwen3.5 nests text_config, Qwen3-Next does not."""
    text = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 320, "rms_norm_eps": 1e-6,
            "full_attention_interval": 2, "max_position_embeddings": 4096,
            "layer_types": ["linear_attention", "full_attention"] * 2, **_LINEAR}
    if model_type == "qwen3_next":
        return {"model_type": model_type, **text, **_MOE, "intermediate_size": 128,
                "rope_theta": 10000.0, "partial_rotary_factor": 0.25, "mlp_only_layers": [],
                "tie_word_embeddings": False}
    if model_type == "qwen3_5_moe":
        text.update(_MOE)
    else:
        text["intermediate_size"] = 128
    tied = model_type == "qwen3_5"   # the small dense Qwen3.5 models tie embeddings
    text.update(model_type=model_type + "_text", rope_parameters=dict(_ROPE),
                tie_word_embeddings=tied)
    return {"model_type": model_type, "text_config": text, "tie_word_embeddings": tied}


def random_weights(config: dict, seed: int = 0, bf16_exact: bool = False) -> dict:
    """Float32 weights in our (mlx-lm's) tree, scaled so activations stay O(1)."""
    model = Model(ModelArgs.from_config(config))
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in tree_flatten(model.parameters()):
        if name.endswith("A_log"):
            w = np.log(rng.uniform(1.0, 4.0, p.shape))
        elif "norm" in name or name.endswith("dt_bias"):
            w = 1.0 + 0.1 * rng.standard_normal(p.shape)
        else:
            w = rng.standard_normal(p.shape) / np.sqrt(p.shape[-1])
        w = mx.array(w.astype(np.float32))
        out[name] = w.astype(mx.bfloat16).astype(mx.float32) if bf16_exact else w
    return out


def one_rounding_off(weights: dict, seed: int = 0) -> dict:
    """The weights with every float32 value moved by one rounding (x (1 +- 2**-23)): a
    model built from them shows how far float32 rounding alone moves its outputs."""
    rng = np.random.default_rng(seed)
    return {k: v * mx.array(1 + 2.0 ** -23 * rng.choice([-1.0, 1.0], v.shape), mx.float32)
            if v.dtype == mx.float32 else v for k, v in weights.items()}


def build_model(config: dict, weights: dict) -> Model:
    model = Model(ModelArgs.from_config(config))
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model


class Rows:
    """Sequences of one test: pages from a counter, a slot per sequence, offsets."""

    def __init__(self, model: nn.Module, page_size: int = 4, num_pages: int = 256,
                 num_slots: int = 16):
        self.model, self.page_size = model, page_size
        self.cache = ModelCache(model.cache_spec(), num_pages, page_size, num_slots)
        self.next_page = 1                      # page 0 is the scratch page
        self.pages: dict[int, list[int]] = {}
        self.offsets: dict[int, int] = {}
        self.slots: dict[int, int] = {}

    def start(self, seq: int, slot: int | None = None) -> None:
        """A new sequence (reusing a slot leaves stale state there, on purpose)."""
        self.pages[seq], self.offsets[seq] = [], 0
        if slot is None:
            slot = min(set(range(len(self.slots) + 1)) - set(self.slots.values()))
        self.slots[seq] = slot

    def forward(self, chunks: dict[int, list[int]], all_logits: bool = False) -> mx.array:
        """Run one forward with a chunk of new tokens per sequence; returns logits."""
        seqs = list(chunks)
        T = max(len(c) for c in chunks.values())
        for s in seqs:
            self._grow(s, self.offsets[s] + len(chunks[s]))
        view = self.view(seqs, [len(chunks[s]) for s in seqs], T, all_logits)
        tokens = mx.array([c + [0] * (T - len(c)) for c in chunks.values()], dtype=mx.int32)
        logits = self.model(tokens, view, self.cache)
        mx.eval(logits, *self.cache.arrays())
        for s in seqs:
            self.offsets[s] += len(chunks[s])
        return logits

    def view(self, seqs: list[int], lengths: list[int], T: int, all_logits: bool) -> BatchView:
        ps = self.page_size
        P = max(len(self.pages[s]) for s in seqs)
        pos = np.zeros((len(seqs), T), np.int32)
        slot_map = np.zeros((len(seqs), T), np.int32)   # padding writes into page 0
        for b, s in enumerate(seqs):
            pos[b] = self.offsets[s] + np.arange(T)
            for t in range(lengths[b]):
                p = pos[b, t]
                slot_map[b, t] = self.pages[s][p // ps] * ps + p % ps
        tables = [self.pages[s] + [0] * (P - len(self.pages[s])) for s in seqs]
        return BatchView(
            offsets=mx.array([self.offsets[s] for s in seqs], dtype=mx.int32),
            lengths=mx.array(lengths, dtype=mx.int32), positions=mx.array(pos),
            slot_mapping=mx.array(slot_map), block_tables=mx.array(tables, dtype=mx.int32),
            state_slots=mx.array([self.slots[s] for s in seqs], dtype=mx.int32),
            page_size=ps, num_tokens=T, ragged=min(lengths) < T, all_logits=all_logits)

    def _grow(self, seq: int, num_tokens: int) -> None:
        while len(self.pages[seq]) * self.page_size < num_tokens:
            self.pages[seq].append(self.next_page)
            self.next_page += 1


# ---- folders as shipped -------------------------------------------------------------


def write_tokenizer(folder: Path) -> None:
    """A tiny byte-level BPE tokenizer.json and tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["hello world, the quick brown fox jumps"] * 4, trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
         "tokenizer_class": "Qwen2Tokenizer", "chat_template": _TEMPLATE}))


_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_mlx_folder(folder: Path, config: dict, weights: dict) -> Path:
    """MLX-community layout: bf16, 4-bit with 8-bit router gates, stacked experts."""
    folder.mkdir(parents=True, exist_ok=True)
    model = build_model(config, {k: v if k.endswith("A_log") else v.astype(mx.bfloat16)
                                 for k, v in weights.items()})
    overrides = {}

    def predicate(path, module):
        rule = quantize_predicate(path, module)
        if isinstance(rule, dict):
            overrides[path] = dict(rule)
        return rule

    nn.quantize(model, group_size=64, bits=4, class_predicate=predicate)
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})
    q = {"group_size": 64, "bits": 4, "mode": "affine", **overrides}
    (folder / "config.json").write_text(json.dumps(
        {**config, "quantization": q, "quantization_config": q}))
    write_tokenizer(folder)
    return folder


def write_hf_folder(folder: Path, config: dict, weights: dict, fused: bool = False) -> Path:
    """HF layout: bf16, per-expert (or fused gate_up) experts, conv [C,1,K], norms as w-1."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, w in weights.items():
        if name.endswith("conv1d.weight"):
            w = w.moveaxis(2, 1)                                     # [C, K, 1] -> [C, 1, K]
        if w.ndim == 1 and name.split(".")[-2] in ("input_layernorm", "post_attention_layernorm",
                                                   "norm", "q_norm", "k_norm") \
                and "linear_attn" not in name:
            w = w - 1.0
        out[_hf_name(name, config)] = w if name.endswith("A_log") else w.astype(mx.bfloat16)
    for key in [k for k in out if ".switch_mlp." in k and k.endswith("gate_proj.weight")]:
        prefix = key[: key.index(".switch_mlp.")]
        g, u, d = (out.pop(f"{prefix}.switch_mlp.{p}_proj.weight") for p in ("gate", "up", "down"))
        if fused:
            out[f"{prefix}.experts.gate_up_proj"] = mx.concatenate([g, u], axis=1)  # [E, 2I, H]
            out[f"{prefix}.experts.down_proj"] = d                                 # [E, H, I]
            continue
        for e in range(g.shape[0]):
            for p, w in (("gate_proj", g), ("up_proj", u), ("down_proj", d)):
                out[f"{prefix}.experts.{e}.{p}.weight"] = w[e]
    if "text_config" in config:   # VL releases ship a vision tower we must drop
        out["model.visual.patch_embed.proj.weight"] = mx.zeros((4, 4), mx.bfloat16)
    mx.save_safetensors(str(folder / "model.safetensors"), out)
    (folder / "config.json").write_text(json.dumps(config))
    write_tokenizer(folder)
    return folder


def _hf_name(name: str, config: dict) -> str:
    if name.startswith("language_model.model."):
        return "model.language_model." + name[len("language_model.model."):]
    if name.startswith("language_model."):
        return name[len("language_model."):]
    return name
