"""One rank's model: the family's Model at local sizes, loaded with its shard only.

The local model is the family's own class built from shard_plan.local_args (fewer
heads, narrower MLPs, an untied head of V/N rows), its MoE blocks swapped for
ShardedMoeBlock (E/N experts), loaded with shard_plan.shard_weights, and then the
projections whose outputs are partial sums are wrapped (layers.AllSum, GatheredHead).
Everything the engine does with a model after that (joining projections, the CPU
layout, the cache spec sized by the local heads) works on it unchanged.
"""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

from engine.distributed.layers import AllSum, GatheredHead, ShardedMoeBlock
from engine.distributed.shard_plan import Shard, local_args, local_vocab, take_shards
from engine.errors import ModelLoadError
from engine.loading import loader
from engine.loading.weight_check import check_weights
from engine.models.config_check import model_args
from engine.models.fused import unfused_parameters
from engine.models.moe import QuantizedSwitchLinear, SparseMoeBlock

_SUMMED = ("o_proj", "out_proj", "down_proj")


def shard_model(model: nn.Module, group) -> nn.Module:
    """This rank's model from a full model in memory (tests, benchmarks, InMemoryModel):
    the same slices a load from disk takes."""
    module = _family_of(model)
    weights = dict(unfused_parameters(model))
    return build_local(module, model.args, weights, group, _qconfig_of(model))


def load_sharded(path: str | Path, group) -> loader.LoadedModel:
    """Read this rank's shard of an MLX or HF safetensors folder. mx.load maps tensors
    lazily; each local slice is evaluated alone, so a rank holds its shard plus at most
    one full tensor at a time, never the whole model."""
    path = Path(path).expanduser()
    if path.is_file():
        raise ModelLoadError(f"{path.name}: several machines load safetensors folders "
                             "only (MLX or Hugging Face), not .gguf files.")
    config = loader.read_config(path)
    weights, origin = loader.read_safetensors(path)
    qconfig = config.get("quantization") or config.get("quantization_config")
    if qconfig and "bits" not in qconfig:
        raise ModelLoadError(f"{path}: this quantization format is not supported; use an "
                             "MLX (mlx-community) or bf16 checkpoint.")
    module = loader._family(loader.model_type_of(config))
    args = model_args(module.ModelArgs, config, str(path / "config.json"))
    weights = module.Model(args).sanitize(weights)     # built lazily: no memory taken
    origin = {k: origin.get(k, "the weights") for k in weights}
    model = build_local(module, args, weights, group, qconfig, origin, path)
    return loader.LoadedModel(model, config, path)


def build_local(module, args, weights: dict, group, qconfig: dict | None = None,
                origin: dict | None = None, where: Path | None = None) -> nn.Module:
    """module: the family (engine.models.llama / qwen3_5); weights: the full model's
    sanitized weights in our tree (lazy is best), emptied as each is sliced."""
    shard = Shard(group.rank(), group.size())
    model = module.Model(local_args(args, shard.size))
    _swap_moe(model, args, shard, group)
    head = _head_path(model)
    _set_module(model, head, nn.Linear(args.hidden_size, local_vocab(args.vocab_size,
                                                                       shard.size), bias=False))
    tied_from = _embedding_path(weights) if args.tie_word_embeddings else None
    local = take_shards(weights, args, shard)          # empties `weights` as it goes
    if qconfig:
        loader._quantize(model, local, _with_head(qconfig, head, tied_from))
    if where is not None:
        check_weights(model, local, {k: (origin or {}).get(k, "the weights") for k in local},
                      where)
    model.load_weights(list(local.items()), strict=True)
    _wrap_partial_sums(model, group)
    _set_module(model, head, GatheredHead(_get_module(model, head), args.vocab_size, group))
    mx.eval(model.parameters())
    return model


def _swap_moe(model: nn.Module, args, shard: Shard, group) -> None:
    """Every SparseMoeBlock -> a ShardedMoeBlock holding experts [first, first + E/N)."""
    for layer in getattr(model, "layers", ()):
        if isinstance(layer.mlp, SparseMoeBlock):
            n = args.num_experts // shard.size
            layer.mlp = ShardedMoeBlock(
                args.hidden_size, args.moe_intermediate_size,
                args.shared_expert_intermediate_size // shard.size, args.num_experts,
                args.num_experts_per_tok, args.norm_topk_prob, shard.rank * n, n, group)


def _wrap_partial_sums(model: nn.Module, group) -> None:
    """o_proj, out_proj and (dense) down_proj -> AllSum; a MoE block's experts and
    shared expert are summed together, in the block."""
    wrapped = [(path, AllSum(m, group)) for path, m in model.named_modules()
               if path.rsplit(".", 1)[-1] in _SUMMED
               and not any(f".{m}." in path for m in ("shared_expert", "switch_mlp"))]
    model.update_modules(tree_unflatten(wrapped))


def _head_path(model: nn.Module) -> str:
    return next(p for p, _ in model.named_modules() if p.rsplit(".", 1)[-1] == "lm_head")


def _get_module(model: nn.Module, path: str) -> nn.Module:
    m = model
    for part in path.split("."):
        m = m[part]
    return m


def _set_module(model: nn.Module, path: str, value: nn.Module) -> None:
    model.update_modules(tree_unflatten([(path, value)]))


def _embedding_path(weights: dict) -> str:
    return next(k for k in weights if k.endswith("embed_tokens.weight"))[:-len(".weight")]


def _with_head(qconfig: dict, head: str, tied_from: str | None) -> dict:
    """A tied head is quantized like the embedding it came from (its own override)."""
    own = qconfig.get(tied_from) if tied_from else None
    return {**qconfig, head: own} if isinstance(own, dict) else qconfig


def _family_of(model: nn.Module):
    import importlib
    return importlib.import_module(type(model).__module__)


def _qconfig_of(model: nn.Module) -> dict | None:
    """Per-module quantization settings of a quantized model in memory (None: dense)."""
    out = {}
    for path, m in model.named_modules():
        if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding, QuantizedSwitchLinear)):
            out[path] = {"group_size": m.group_size, "bits": m.bits}
    return out or None
