"""Qwen3.5 / Qwen3.6 (MoE and dense) and Qwen3-Next: Gated DeltaNet + gated attention.

Most layers are Gated DeltaNet (engine/models/gated_deltanet.py) with per-sequence
recurrent state; every few layers is a full-attention layer over the paged KV
pool. The module tree mirrors mlx-lm's (``language_model.model.layers...`` for
Qwen3.5, ``model.layers...`` for Qwen3-Next) so quantization overrides in
MLX-community config.json files name our modules.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from engine.core.batch_view import BatchView
from engine.models.attention import grouped_paged_attention, merge_heads
from engine.models.base import CacheSpec, ModelCache
from engine.models.elementwise import carried_norm, residual_norm, sigmoid_gate
from engine.models.fused import fuse_linears
from engine.models.gated_deltanet import GatedDeltaNet, NextGatedDeltaNet
from engine.models.layer_pieces import Carry, run_layers
from engine.models.mlp import MLP
from engine.models.moe import SparseMoeBlock
from engine.models.projection import project, project_normed
from engine.models.qwen3_5_config import NEXT_TYPES, QWEN3_5_TYPES, ModelArgs
from engine.models.qwen3_5_weights import quantize_predicate, sanitize_weights
from engine.models.row_groups import RowGroups
from engine.models.shapes import reshaped
from kernels.kernel_set import NO_KERNELS

MODEL_TYPES = QWEN3_5_TYPES + NEXT_TYPES
__all__ = ["MODEL_TYPES", "Model", "ModelArgs", "quantize_predicate"]


class Attention(nn.Module):
    """Gated full attention: q_proj yields queries and an output gate per head."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.hq, self.hkv, self.d = args.num_attention_heads, args.num_key_value_heads, args.head_dim
        self.scale = self.d ** -0.5
        self.rotary_dim, self.theta = args.rotary_dim, args.rope_theta
        bias = args.attention_bias
        self.q_proj = nn.Linear(args.hidden_size, 2 * self.hq * self.d, bias=bias)
        self.k_proj = nn.Linear(args.hidden_size, self.hkv * self.d, bias=bias)
        self.v_proj = nn.Linear(args.hidden_size, self.hkv * self.d, bias=bias)
        self.o_proj = nn.Linear(self.hq * self.d, args.hidden_size, bias=bias)
        self.q_norm = nn.RMSNorm(self.d, eps=args.rms_norm_eps)
        self.k_norm = nn.RMSNorm(self.d, eps=args.rms_norm_eps)
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def fuse_projections(self) -> None:
        """After loading: q (with its gate), k and v become one matmul."""
        fuse_linears(self, ("q_proj", "k_proj", "v_proj"), "qkv_proj")

    def __call__(self, x: mx.array, rows: RowGroups, kv: list[mx.array],
                 input_norm: nn.RMSNorm | None = None) -> mx.array:
        """x [N, H] (every group's tokens) -> [N, H]: the projections run once on all
        tokens, the attention per group with its own view. input_norm: x is the layer's
        input before this norm (the joined projection applies it: kernels/qmv_normed at
        one decode row)."""
        if "qkv_proj" in self:
            # the decode kernels read q+gate, k and v as columns of the joined output (no
            # Split)
            qg = k = v = self.qkv_proj.joined_output(x, norm=input_norm)
            kv_columns = tuple(self.qkv_proj.parts.starts[1:])
        else:
            x = x if input_norm is None else input_norm(x)
            qg, k, v, kv_columns = self.q_proj(x), self.k_proj(x), self.v_proj(x), None
        if rows.single_decode:
            out = self._kernel_decode(qg, k, v, rows.views[0], kv, kv_columns)  # [B, Hq*D]
            if out is not None:
                return project(self.kernel_set, self.o_proj, out)
        if kv_columns is not None:
            qg, k, v = self.qkv_proj.split(qg)                       # [N, 2*Hq*D], [N, Hkv*D]
        groups = [self._rotated(*p, view) for view, *p
                  in zip(rows.views, rows.split(qg), rows.split(k), rows.split(v))]
        out = grouped_paged_attention([g[:3] for g in groups], kv, rows.views, self.scale,
                                      self.kernel_set)                # per group [B, Hq, T, D]
        return project(self.kernel_set, self.o_proj,
                       rows.join([sigmoid_gate(merge_heads(o), gate)
                                  for o, (*_, gate) in zip(out, groups)]))      # [N, H]

    def _kernel_decode(self, qg, k, v, view: BatchView, kv: list[mx.array],
                       kv_columns: tuple[int, int] | None = None):
        """Decode of one group through the kernel set: q/k norms, rotary and the K/V pool
        writes in one launch (kernels/attention_prep.py), then the paged attention with
        the output gate inside its second pass. qg [B, 2*Hq*D], k, v [B, Hkv*D] ->
        gated output [B, Hq*D]; None: no prep kernel for this call (nothing written)."""
        ks = self.kernel_set
        out = ks.attention_prep(qg, k, v, self.q_norm.weight, self.k_norm.weight,
                                self.q_norm.eps, view.offsets, reshaped(view.slot_mapping, -1),
                                kv[0], kv[1], (self.hq, self.hkv, self.d, 2 * self.d),
                                self.rotary_dim, self.theta, kv_columns)
        if out is None:
            return None
        q, (kv[0], kv[1]) = out                                              # [B, Hq, D]
        # the gate: each head's second half of qg, read there by the launch (GATED=2)
        o = ks.paged_decode_attention(q, kv[0], kv[1], view.block_tables, view.context_lens,
                                      view.page_size, self.scale, gate=qg, joined=True)
        # attention_prep runs only where the paged kernel reads its pools (KernelSet says
        # why: no other reader is ordered after its in-place writes on a GPU).
        assert o is not None, "attention_prep ran without the paged kernel to read its pools"
        return o                                                             # [B, Hq*D]

    def _rotated(self, qg, k, v, view: BatchView) -> tuple[mx.array, ...]:
        """One group's projections [B, T, *] -> (q [B, Hq, T, D], k/v [B, Hkv, T, D]
        normed and roped, the output gate [B, T, Hq*D])."""
        B, T, _ = qg.shape
        qg = qg.reshape(B, T, self.hq, 2 * self.d)                           # [B, T, Hq, 2D]
        q, gate = qg[..., :self.d], qg[..., self.d:]                         # [B, T, Hq, D] each
        q = self.q_norm(q).transpose(0, 2, 1, 3)                             # [B, Hq, T, D]
        k = self.k_norm(k.reshape(B, T, self.hkv, self.d)).transpose(0, 2, 1, 3)
        v = v.reshape(B, T, self.hkv, self.d).transpose(0, 2, 1, 3)
        # Row b's tokens sit at positions offsets[b] + 0..T-1: one rope call for all rows.
        q = self._rope(q, view.offsets)                                      # [B, Hq, T, D]
        k = self._rope(k, view.offsets)                                      # [B, Hkv, T, D]
        return q, k, v, gate.reshape(B, T, -1)

    def _rope(self, x: mx.array, offsets: mx.array) -> mx.array:
        return mx.fast.rope(x, self.rotary_dim, traditional=False, base=self.theta,
                            scale=1.0, offset=offsets)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        self.is_linear = args.is_linear(layer)
        if self.is_linear:
            self.linear_attn = (NextGatedDeltaNet if args.is_next else GatedDeltaNet)(args)
        else:
            self.self_attn = Attention(args)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        if args.is_moe(layer):
            self.mlp = SparseMoeBlock(args.hidden_size, args.moe_intermediate_size,
                                      args.shared_expert_intermediate_size, args.num_experts,
                                      args.num_experts_per_tok, args.norm_topk_prob)
        else:
            self.mlp = MLP(args.hidden_size, args.intermediate_size)
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def __call__(self, x: mx.array, rows: RowGroups, cache_entry: list[mx.array],
                 pending: mx.array | None = None) -> tuple[mx.array, mx.array | None]:
        """x [N, H], every group's tokens: the mixer runs per group, the rest once.
        pending: the previous layer's MLP output not yet added to x (a dense layer's), or
        None. -> (the residual stream, this layer's pending output): a dense MLP's output
        is added by the next layer's input norm (kernels/add_rms_norm: one launch, not an
        Add and an RMSNorm); the MoE block adds its residual in its own last op. Without
        a carried output the input norm goes to the mixer, whose input projection applies
        it (kernels/qmv_normed: one launch at one decode row)."""
        mixer = self.linear_attn if self.is_linear else self.self_attn
        if pending is None:     # the norm's one reader is the mixer's input projection
            mixed = mixer(x, rows, cache_entry, input_norm=self.input_layernorm)  # [N, H]
        else:
            x, normed = carried_norm(self.kernel_set, x, pending, self.input_layernorm)
            mixed = mixer(normed, rows, cache_entry)                         # [N, H]
        norm = self.post_attention_layernorm
        if isinstance(self.mlp, SparseMoeBlock):
            # at one decode row the add, the norm and the router in one launch
            h, normed, gates = (self.mlp.gates_after_norm(x, mixed, norm)
                                or (*residual_norm(self.kernel_set, x, mixed, norm), None))
            return self.mlp(normed, residual=h, route_rows=rows.route_rows, gates=gates), None
        h, normed = residual_norm(self.kernel_set, x, mixed, norm)
        return h, self.mlp(normed)


class Backbone(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = [DecoderLayer(args, i) for i in range(args.num_hidden_layers)]
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)


class Model(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)
        # Qwen3.5 checkpoints nest the text model under language_model (VL exports).
        body = self if args.is_next else nn.Module()
        body.model = Backbone(args)
        if not args.tie_word_embeddings:
            body.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if body is not self:
            self.language_model = body

    @property
    def body(self) -> nn.Module:
        return self if self.args.is_next else self.language_model

    @property
    def layers(self) -> list[DecoderLayer]:
        return self.body.model.layers

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
        backbone = self.body.model
        rows = RowGroups([view for _, view in groups])
        h = run_layers(backbone.layers, self._cache_entries(cache), rows,
                       lambda: backbone.embed_tokens(rows.join_tokens([t for t, _ in groups])),
                       cache.kv + cache.states, layers, carry)
        if isinstance(h, Carry):
            return h
        h = rows.select_logit_rows(h)                                        # [M, H]
        if self.args.tie_word_embeddings:
            return rows.split_logits(backbone.embed_tokens.as_linear(backbone.norm(h)))
        # the final norm inside the head's product at one row (kernels/qmv_normed)
        return rows.split_logits(project_normed(self.kernel_set, self.body.lm_head, h,
                                                backbone.norm))              # [B_g, *, V]

    def _cache_entries(self, cache: ModelCache) -> list[list[mx.array]]:
        """Each layer's own cache lists, in layer order: a Gated DeltaNet layer's state
        slots, an attention layer's K/V pools (the lists the layers change in place)."""
        kv, states = iter(cache.kv), iter(cache.states)
        return [next(states) if layer.is_linear else next(kv) for layer in self.layers]

    def fuse_projections(self) -> None:
        """Join projections that read the same input (engine/models/fused.py), one layer
        at a time so the copies never hold more than one layer's weights twice."""
        for layer in self.layers:
            (layer.linear_attn if layer.is_linear else layer.self_attn).fuse_projections()
            layer.mlp.fuse_projections()
            mx.eval(layer.parameters())

    def cache_spec(self) -> CacheSpec:
        linear = [layer.linear_attn for layer in self.layers if layer.is_linear]
        return CacheSpec(
            num_kv_layers=sum(not layer.is_linear for layer in self.layers),
            num_kv_heads=self.args.num_key_value_heads,
            head_dim=self.args.head_dim,
            kv_dtype=self._compute_dtype(),
            state_layers=tuple(g.state_specs(self._compute_dtype()) for g in linear),
        )

    def _compute_dtype(self) -> mx.Dtype:
        """The activations' dtype: the embedding's (its scales' when quantized)."""
        emb = self.body.model.embed_tokens
        return emb.scales.dtype if isinstance(emb, nn.QuantizedEmbedding) else emb.weight.dtype

    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        return sanitize_weights(weights, self.args)
