"""Configuration of the Qwen3.5 / Qwen3.6 / Qwen3-Next hybrid family, as shipped.

A config.json may hold the text model's fields at the top level (Qwen3-Next,
text-only exports) or under ``text_config`` (the multimodal Qwen3.5 releases:
the vision tower is dropped, and its multimodal rope sections collapse to plain
rope because text tokens have equal t/h/w positions).
"""
from __future__ import annotations

from dataclasses import dataclass

LINEAR = "linear_attention"
FULL = "full_attention"
NEXT_TYPES = ("qwen3_next",)
QWEN3_5_TYPES = ("qwen3_5_moe", "qwen3_5")


@dataclass(frozen=True)
class ModelArgs:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    tie_word_embeddings: bool
    layer_types: tuple[str, ...]
    # Gated DeltaNet
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    # Dense MLP (qwen3_5 and Qwen3-Next's mlp_only_layers)
    intermediate_size: int = 0
    attention_bias: bool = False
    # MoE (num_experts == 0: dense)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()

    def __post_init__(self):
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError("layer_types must name every layer")
        if any(t not in (LINEAR, FULL) for t in self.layer_types):
            raise ValueError(f"unknown layer type in {self.layer_types}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError("linear value heads must be a multiple of linear key heads")
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError("num_experts_per_tok must be in 1..num_experts")

    @classmethod
    def from_config(cls, config: dict) -> ModelArgs:
        text = config.get("text_config", config)
        model_type = config["model_type"]
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        heads = text["num_attention_heads"]
        head_dim = text.get("head_dim") or text["hidden_size"] // heads
        n_layers = text["num_hidden_layers"]
        return cls(
            model_type=model_type,
            vocab_size=text["vocab_size"],
            hidden_size=text["hidden_size"],
            num_hidden_layers=n_layers,
            num_attention_heads=heads,
            num_key_value_heads=text.get("num_key_value_heads", heads),
            head_dim=head_dim,
            rms_norm_eps=text.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 10000.0))),
            partial_rotary_factor=float(
                rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))),
            # VL exports may keep the flag at the top level only.
            tie_word_embeddings=bool(
                text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
            layer_types=_layer_types(text, n_layers),
            linear_num_key_heads=text["linear_num_key_heads"],
            linear_num_value_heads=text["linear_num_value_heads"],
            linear_key_head_dim=text["linear_key_head_dim"],
            linear_value_head_dim=text["linear_value_head_dim"],
            linear_conv_kernel_dim=text.get("linear_conv_kernel_dim", 4),
            intermediate_size=text.get("intermediate_size", 0),
            attention_bias=text.get("attention_bias", False),
            num_experts=text.get("num_experts", 0) or 0,
            num_experts_per_tok=text.get("num_experts_per_tok", 0) or 0,
            moe_intermediate_size=text.get("moe_intermediate_size", 0) or 0,
            shared_expert_intermediate_size=text.get("shared_expert_intermediate_size", 0) or 0,
            # mlx-lm's defaults differ by family: Qwen3-Next False, Qwen3.5 True.
            norm_topk_prob=text.get("norm_topk_prob", model_type not in NEXT_TYPES),
            decoder_sparse_step=text.get("decoder_sparse_step", 1) or 1,
            mlp_only_layers=tuple(text.get("mlp_only_layers") or ()),
        )

    @property
    def is_next(self) -> bool:
        """Qwen3-Next: fused in_proj_qkvz / in_proj_ba, top level weight names."""
        return self.model_type in NEXT_TYPES

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v side by side."""
        return 2 * self.key_dim + self.value_dim

    def is_linear(self, layer: int) -> bool:
        return self.layer_types[layer] == LINEAR

    def is_moe(self, layer: int) -> bool:
        return (self.num_experts > 0 and layer not in self.mlp_only_layers
                and (layer + 1) % self.decoder_sparse_step == 0)


def _layer_types(text: dict, n_layers: int) -> tuple[str, ...]:
    if text.get("layer_types"):
        return tuple(text["layer_types"])
    interval = text.get("full_attention_interval", 4)
    return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(n_layers))
