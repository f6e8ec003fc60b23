"""An independent float64 numpy forward of a Llama-family model (no mlx ops), used to
judge the CPU's dense and quantized paths against exact arithmetic."""
from __future__ import annotations

import numpy as np
from mlx.utils import tree_flatten


def unpack_affine(packed, scales, biases, group_size: int, bits: int) -> np.ndarray:
    """MLX affine quantization -> float64 [out, in]: each uint32 holds 32/bits values,
    lowest bits first; value * scale + bias per group of group_size inputs."""
    words = np.asarray(packed).astype(np.uint64)                        # [out, in*bits/32]
    shifts = np.arange(0, 32, bits, dtype=np.uint64)
    q = (words[..., None] >> shifts) & np.uint64((1 << bits) - 1)       # [out, W, 32/bits]
    q = q.reshape(words.shape[0], -1).astype(np.float64)                # [out, in]
    s = np.repeat(np.asarray(scales, np.float64), group_size, axis=1)
    b = np.repeat(np.asarray(biases, np.float64), group_size, axis=1)
    return q * s + b


def float64_weights(model) -> dict[str, np.ndarray]:
    """Every weight as float64; quantized ones unpacked from their packed integers."""
    quantized = {path: m for path, m in model.named_modules()
                 if hasattr(m, "bits") and hasattr(m, "scales")}
    out = {}
    for k, v in tree_flatten(model.parameters()):
        owner, _, leaf = k.rpartition(".")
        m = quantized.get(owner)
        if m is None:
            out[k] = np.asarray(v, np.float64)
        elif leaf == "weight":
            out[k] = unpack_affine(v, m.scales, m.biases, m.group_size, m.bits)
    return out


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope(x, base):                      # x [H, T, D], non-traditional (halves rotate)
    D = x.shape[-1]
    inv = base ** (-np.arange(0, D, 2, dtype=np.float64) / D)          # [D/2]
    ang = np.arange(x.shape[1], dtype=np.float64)[:, None] * inv        # [T, D/2]
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = x[..., :D // 2], x[..., D // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)


def _attention(w, p, h, args):
    T = h.shape[0]
    Hq, Hk, D = args.num_attention_heads, args.num_key_value_heads, args.head_dim
    q = (h @ w[f"{p}.q_proj.weight"].T).reshape(T, Hq, D).transpose(1, 0, 2)
    k = (h @ w[f"{p}.k_proj.weight"].T).reshape(T, Hk, D).transpose(1, 0, 2)
    v = (h @ w[f"{p}.v_proj.weight"].T).reshape(T, Hk, D).transpose(1, 0, 2)
    q, k = _rope(q, args.rope_theta), _rope(k, args.rope_theta)
    k, v = np.repeat(k, Hq // Hk, 0), np.repeat(v, Hq // Hk, 0)        # [Hq, T, D]
    s = q @ k.transpose(0, 2, 1) * D ** -0.5                             # [Hq, T, T]
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    out = (s / s.sum(-1, keepdims=True)) @ v                             # [Hq, T, D]
    return out.transpose(1, 0, 2).reshape(T, -1) @ w[f"{p}.o_proj.weight"].T


def float64_logits(model, token_ids: list[int]) -> np.ndarray:
    """[T, vocab] float64 logits of a Llama (tied embeddings, no qkv bias, no qk norm)."""
    args, w = model.args, float64_weights(model)
    eps = args.rms_norm_eps
    h = w["model.embed_tokens.weight"][token_ids]                        # [T, D]
    for i in range(len(model.model.layers)):
        p = f"model.layers.{i}"
        h = h + _attention(w, f"{p}.self_attn", _rms(h, w[f"{p}.input_layernorm.weight"],
                                                      eps), args)
        x = _rms(h, w[f"{p}.post_attention_layernorm.weight"], eps)
        g, u = x @ w[f"{p}.mlp.gate_proj.weight"].T, x @ w[f"{p}.mlp.up_proj.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ w[f"{p}.mlp.down_proj.weight"].T
    h = _rms(h, w["model.norm.weight"], eps)
    return h @ w["model.embed_tokens.weight"].T
