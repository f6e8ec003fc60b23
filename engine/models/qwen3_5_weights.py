"""Turning every shipped weight layout of the Qwen3.5 / Qwen3-Next family into our tree.

Layouts seen in the wild:
- MLX-community folders: experts already stacked as ``mlp.switch_mlp.*_proj``,
  possibly quantized, names under ``language_model.model.`` (VL exports).
- HF folders: names under ``model.language_model.`` (Qwen3.5 VL) or ``model.``;
  experts one by one (``mlp.experts.{e}.gate_proj.weight``) or fused
  (``mlp.experts.gate_up_proj`` [E, 2I, H] and ``mlp.experts.down_proj`` [E, H, I]);
  conv1d weights [C, 1, K] (MLX wants [C, K, 1]); RMSNorm weights stored as
  (w - 1). The HF layout is recognised by its conv1d shape, as mlx-lm does.
Vision-tower and multi-token-prediction weights are dropped.
"""
from __future__ import annotations

import mlx.core as mx

from engine.models.qwen3_5_config import ModelArgs

# Zero-centred norms in HF checkpoints; the gated norm of the DeltaNet is not one.
_SHIFTED_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight",
                  "model.norm.weight", ".q_norm.weight", ".k_norm.weight")
_DROPPED = ("vision_tower", "model.visual", "visual.", "mtp.")
_PROJS = ("gate_proj", "up_proj", "down_proj")


def quantize_predicate(path: str, module) -> bool | dict:
    """Quantize-on-load rule for bf16 folders: router gates at 8 bits, the rest default."""
    if not hasattr(module, "to_quantized"):
        return False
    if path.endswith("mlp.gate") or path.endswith("shared_expert_gate"):
        # The router picks experts: 4-bit noise there changes which experts run.
        return {"group_size": 64, "bits": 8}
    return True


def sanitize_weights(weights: dict[str, mx.array], args: ModelArgs) -> dict[str, mx.array]:
    root = "model." if args.is_next else "language_model.model."
    out = {_rename(k, args): v for k, v in weights.items()
           if not any(k.startswith(d) or f".{d}" in k for d in _DROPPED)}
    for layer in range(args.num_hidden_layers):
        _stack_experts(out, f"{root}layers.{layer}.mlp", args.num_experts)
    if args.tie_word_embeddings:
        out.pop("lm_head.weight" if args.is_next else "language_model.lm_head.weight", None)
    hf_layout = any("conv1d.weight" in k and v.shape[-1] != 1 for k, v in out.items())
    if hf_layout:
        for k, v in out.items():
            if "conv1d.weight" in k and v.shape[-1] != 1:
                out[k] = v.moveaxis(2, 1)                 # [C, 1, K] -> [C, K, 1]
            elif v.ndim == 1 and k.endswith(_SHIFTED_NORMS):
                out[k] = v + 1.0
    return out


def _rename(key: str, args: ModelArgs) -> str:
    """Map a checkpoint name onto our tree (mlx-lm's)."""
    if key.startswith("model.language_model."):
        key = "language_model.model." + key[len("model.language_model."):]
    elif not key.startswith("language_model."):
        key = "language_model." + key
    if args.is_next:
        key = key[len("language_model."):]
    return key


def _stack_experts(w: dict[str, mx.array], prefix: str, num_experts: int) -> None:
    """Experts one by one or fused -> switch_mlp.{gate,up,down}_proj.weight [E, out, in]."""
    fused = f"{prefix}.experts.gate_up_proj"
    if fused in w:
        gate_up = w.pop(fused)                            # [E, 2I, H]
        mid = gate_up.shape[-2] // 2
        w[f"{prefix}.switch_mlp.gate_proj.weight"] = gate_up[..., :mid, :]
        w[f"{prefix}.switch_mlp.up_proj.weight"] = gate_up[..., mid:, :]
        w[f"{prefix}.switch_mlp.down_proj.weight"] = w.pop(f"{prefix}.experts.down_proj")
        return
    if f"{prefix}.experts.0.gate_proj.weight" not in w:
        return
    for proj in _PROJS:
        stacked = [w.pop(f"{prefix}.experts.{e}.{proj}.weight") for e in range(num_experts)]
        w[f"{prefix}.switch_mlp.{proj}.weight"] = mx.stack(stacked)  # [E, out, in]
