"""Llama-family decoders: Llama 2/3, SmolLM/SmolLM2, Qwen2 (qkv biases), Qwen3 (q/k norm)."""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from engine.core.batch_view import BatchView
from engine.models.attention import grouped_paged_attention, merge_heads
from engine.models.base import CacheSpec, ModelCache
from engine.models.elementwise import carried_norm, residual_norm
from engine.models.fused import fuse_linears
from engine.models.layer_pieces import Carry, run_layers
from engine.models.mlp import MLP
from engine.models.rope import RoPE
from engine.models.row_groups import RowGroups
from engine.models.shapes import reshaped
from kernels.kernel_set import NO_KERNELS

MODEL_TYPES = ("llama", "smollm", "smollm2", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class ModelArgs:
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_traditional: bool = False
    rope_scaling: dict | None = None
    attention_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = True

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

    @classmethod
    def from_config(cls, c: dict) -> ModelArgs:
        heads = c["num_attention_heads"]
        mt = c.get("model_type", "llama")
        return cls(
            model_type=mt, hidden_size=c["hidden_size"],
            num_hidden_layers=c["num_hidden_layers"],
            intermediate_size=c["intermediate_size"], num_attention_heads=heads,
            num_key_value_heads=c.get("num_key_value_heads") or heads,
            vocab_size=c["vocab_size"],
            head_dim=c.get("head_dim") or c["hidden_size"] // heads,
            rms_norm_eps=c.get("rms_norm_eps", 1e-5),
            rope_theta=c.get("rope_theta", 10000.0),
            rope_traditional=c.get("rope_traditional", False),
            rope_scaling=c.get("rope_scaling"),
            attention_bias=c.get("attention_bias", mt == "qwen2"),
            qk_norm=mt == "qwen3",
            tie_word_embeddings=c.get("tie_word_embeddings", mt != "qwen2"),
        )


class Attention(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = (a.num_attention_heads,
                                                  a.num_key_value_heads, a.head_dim)
        self.scale = a.head_dim ** -0.5
        bias = a.attention_bias
        self.q_proj = nn.Linear(a.hidden_size, self.n_heads * a.head_dim, bias=bias)
        self.k_proj = nn.Linear(a.hidden_size, self.n_kv * a.head_dim, bias=bias)
        self.v_proj = nn.Linear(a.hidden_size, self.n_kv * a.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * a.head_dim, a.hidden_size, bias=False)
        if a.qk_norm:
            self.q_norm = nn.RMSNorm(a.head_dim, eps=a.rms_norm_eps)
            self.k_norm = nn.RMSNorm(a.head_dim, eps=a.rms_norm_eps)
        self.qk_norm = a.qk_norm
        self.rope = RoPE(a.head_dim, a.rope_theta, a.rope_traditional, a.rope_scaling)
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def fuse_projections(self) -> None:
        """After loading: q, k and v become one matmul (engine/models/fused.py)."""
        fuse_linears(self, ("q_proj", "k_proj", "v_proj"), "qkv_proj")

    def __call__(self, x: mx.array, rows: RowGroups, kv: list[mx.array]) -> mx.array:
        """x [N, H] (every group's tokens) -> [N, H]: the projections run once on all
        tokens, the attention per group with its own view."""
        if "qkv_proj" in self:
            # the decode kernels read q, k and v as columns of the joined output (no Split)
            q = k = v = self.qkv_proj.joined_output(x)
            kv_columns = tuple(self.qkv_proj.parts.starts[1:])
        else:
            q, k, v, kv_columns = self.q_proj(x), self.k_proj(x), self.v_proj(x), None
        if rows.single_decode:
            out = self._kernel_decode(q, k, v, rows.views[0], kv, kv_columns)
            if out is not None:
                return self.o_proj(out)                       # [B, H]
        if kv_columns is not None:
            q, k, v = self.qkv_proj.split(q)                  # [N, Hq*D], [N, Hkv*D] x2
        qkv = [self._rotated(*p, view) for view, *p
               in zip(rows.views, rows.split(q), rows.split(k), rows.split(v))]
        out = grouped_paged_attention(qkv, kv, rows.views, self.scale, self.kernel_set)
        return self.o_proj(rows.join([merge_heads(o) for o in out]))  # [N, H]

    def _kernel_decode(self, q, k, v, view: BatchView, kv: list[mx.array],
                       kv_columns: tuple[int, int] | None = None) -> mx.array | None:
        """Decode of one group through the kernel set, as Qwen3.5's gated attention runs
        it: the q/k norms (where the family has them), rotary and the K/V pool writes in
        one launch (kernels/attention_prep.py, NORM=0 without norms), then the paged
        attention, its output declared [B, Hq*D]. The general path builds ~30 graph
        nodes a layer around the same work (views to [B, H, T, D] and back, two ropes,
        two scatters), each replayed by MLX's host every step. q [B, Hq*D], k, v
        [B, Hkv*D] (or all three the joined projection, k and v at kv_columns) ->
        [B, Hq*D]; None: not for this call (nothing written)."""
        rope = self.rope
        if rope._freqs is not None or rope.scale != 1.0 or rope.traditional:
            return None                                       # the prep kernel's rope only
        norms = (self.q_norm.weight, self.k_norm.weight) if self.qk_norm else (None, None)
        eps = self.q_norm.eps if self.qk_norm else 0.0
        D = self.head_dim
        ks = self.kernel_set
        out = ks.attention_prep(q, k, v, *norms, eps, view.offsets,
                                reshaped(view.slot_mapping, -1), kv[0], kv[1],
                                (self.n_heads, self.n_kv, D, D), rope.dims, rope.base,
                                kv_columns)
        if out is None:
            return None
        q, (kv[0], kv[1]) = out                                              # [B, Hq, D]
        o = ks.paged_decode_attention(q, kv[0], kv[1], view.block_tables, view.context_lens,
                                      view.page_size, self.scale, joined=True)
        # attention_prep runs only where the paged kernel reads its pools (KernelSet)
        assert o is not None, "attention_prep ran without the paged kernel to read its pools"
        return o                                                             # [B, Hq*D]

    def _rotated(self, q, k, v, view: BatchView) -> tuple[mx.array, mx.array, mx.array]:
        """One group's q, k, v [B, T, *] -> q [B, Hq, T, D], k/v [B, Hkv, T, D], roped."""
        B, T, _ = q.shape
        q = q.reshape(B, T, self.n_heads, -1)                 # [B, T, Hq, D]
        k = k.reshape(B, T, self.n_kv, -1)                    # [B, T, Hkv, D]
        v = v.reshape(B, T, self.n_kv, -1)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = self.rope(q.transpose(0, 2, 1, 3), view.offsets)  # [B, Hq, T, D]
        k = self.rope(k.transpose(0, 2, 1, 3), view.offsets)
        return q, k, v.transpose(0, 2, 1, 3)


class Block(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.self_attn = Attention(a)
        self.mlp = MLP(a.hidden_size, a.intermediate_size)
        self.input_layernorm = nn.RMSNorm(a.hidden_size, eps=a.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(a.hidden_size, eps=a.rms_norm_eps)
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def __call__(self, x: mx.array, rows: RowGroups, kv: list[mx.array],
                 pending: mx.array | None = None) -> tuple[mx.array, mx.array]:
        """x [N, H]: the residual stream; pending: the previous layer's MLP output, not yet
        added (None in the first layer). -> (the stream before this layer's MLP output,
        that output). The add is left to the next layer's input norm: with
        kernels/add_rms_norm the add and the norm are one launch, not two."""
        x, normed = carried_norm(self.kernel_set, x, pending, self.input_layernorm)
        mixed = self.self_attn(normed, rows, kv)                        # [N, H]
        h, normed = residual_norm(self.kernel_set, x, mixed, self.post_attention_layernorm)
        return h, self.mlp(normed)


class LlamaModel(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = [Block(a) for _ in range(a.num_hidden_layers)]
        self.norm = nn.RMSNorm(a.hidden_size, eps=a.rms_norm_eps)


class Model(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.model_type = args.model_type
        self.model = LlamaModel(args)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    @property
    def layers(self) -> list[Block]:
        return self.model.layers

    def __call__(self, tokens: mx.array, view: BatchView, cache: ModelCache) -> mx.array:
        return self.forward_groups([(tokens, view)], cache)[0]

    def forward_groups(self, groups: list[tuple[mx.array, BatchView]], cache: ModelCache,
                       layers: tuple[int, int] | None = None,
                       carry: Carry | None = None) -> list[mx.array] | Carry:
        """One forward over groups of rows (engine/models/row_groups.py): tokens
        [B_g, T_g] with their view each -> each group's logits, as __call__ returns them.
        layers: only [start, stop) of them, from the Carry the piece before left (none
        for the first); a piece ending before the last layer returns its Carry
        (engine/models/layer_pieces.py)."""
        rows = RowGroups([view for _, view in groups])
        h = run_layers(self.model.layers, cache.kv, rows,
                       lambda: self.model.embed_tokens(rows.join_tokens([t for t, _ in groups])),
                       cache.kv, layers, carry)
        if isinstance(h, Carry):
            return h
        h = self.model.norm(rows.select_logit_rows(h))                        # [M, D]
        if self.args.tie_word_embeddings:
            return rows.split_logits(self.model.embed_tokens.as_linear(h))
        return rows.split_logits(self.lm_head(h))

    def fuse_projections(self) -> None:
        """Join projections that read the same input, one layer at a time."""
        for layer in self.model.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()
            mx.eval(layer.parameters())

    def cache_spec(self, dtype: mx.Dtype | None = None) -> CacheSpec:
        a = self.args
        return CacheSpec(a.num_hidden_layers, a.num_key_value_heads, a.head_dim,
                         dtype or self.model.norm.weight.dtype)

    def sanitize(self, weights: dict) -> dict:
        weights = {k: v for k, v in weights.items() if "rotary_emb.inv_freq" not in k}
        if self.args.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
            weights.pop("lm_head.scales", None)
            weights.pop("lm_head.biases", None)
        return weights
