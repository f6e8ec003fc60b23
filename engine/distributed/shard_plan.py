"""Which part of each weight a rank keeps: the sharding plan, by weight name.

Works on the flat weights of our (mlx-lm's) tree, after the family's sanitize and
before anything is evaluated: a slice of a lazily loaded array is all a rank reads
into memory for good. Quantized weights slice like dense ones: their output rows
(axis 0) carry whole rows of scales and biases, and an input-column split keeps whole
quantization groups (checked).

    split rows (outputs)    q/k/v, gate/up (MLP, shared expert), the DeltaNet's input
                            projections, conv and per-head vectors, the vocab head
    split columns (inputs)  o_proj, out_proj, down_proj: the block's partial sum
    split experts (axis 0)  switch_mlp.*
    replicated              embeddings, norms, the router and the shared expert's gate
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import mlx.core as mx

from engine.arith import ceil_div

_ROW_MODULES = ("q_proj", "gate_proj", "up_proj", "in_proj_z", "in_proj_b", "in_proj_a",
                "in_proj_qkvz", "in_proj_ba")
_KV_MODULES = ("k_proj", "v_proj")
_COLUMN_MODULES = ("o_proj", "out_proj", "down_proj")
_HEAD_VECTORS = ("dt_bias", "A_log")
_QKV_MODULES = ("in_proj_qkv", "conv1d")     # [q | k | v] rows: each part split alone


class ShardingError(ValueError):
    """The model's heads, widths or experts do not divide among the ranks."""


@dataclass(frozen=True)
class Shard:
    rank: int
    size: int

    def __post_init__(self):
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is outside a group of {self.size}")

    def part(self, v: mx.array, axis: int, what: str) -> mx.array:
        """This rank's 1/size of v along axis (it must divide)."""
        n = v.shape[axis]
        if n % self.size:
            raise ShardingError(f"{what}: {n} along axis {axis} does not split in "
                                f"{self.size}; run on a number of machines that divides it.")
        step = n // self.size
        return _take(v, axis, self.rank * step, (self.rank + 1) * step)

    def kv_heads(self, num_kv_heads: int) -> tuple[int, int]:
        """(first, count) of the K/V heads this rank keeps: its share when they split,
        else the one head its query heads read (replicated over size/heads ranks)."""
        if num_kv_heads % self.size == 0:
            n = num_kv_heads // self.size
            return self.rank * n, n
        if self.size % num_kv_heads:
            raise ShardingError(f"{num_kv_heads} K/V heads neither split nor repeat over "
                                f"{self.size} ranks")
        return self.rank * num_kv_heads // self.size, 1


def _take(v: mx.array, axis: int, start: int, stop: int) -> mx.array:
    index = [slice(None)] * v.ndim
    index[axis] = slice(start, stop)
    return v[tuple(index)]


def local_args(args, size: int):
    """The family's ModelArgs of one rank's model: heads and hidden widths divided;
    the head untied (each rank keeps its rows of the vocabulary); experts stay (the
    router scores all of them; sharding.py swaps in the local experts)."""
    def div(name: str) -> int:
        n = getattr(args, name)
        if n % size:
            raise ShardingError(f"{name} = {n} does not split in {size} ranks")
        return n // size

    shard = Shard(0, size)
    over = {"num_attention_heads": div("num_attention_heads"),
            "num_key_value_heads": shard.kv_heads(args.num_key_value_heads)[1],
            "tie_word_embeddings": False}
    if getattr(args, "intermediate_size", 0):
        over["intermediate_size"] = div("intermediate_size")
    if hasattr(args, "linear_num_key_heads"):
        over.update(linear_num_key_heads=div("linear_num_key_heads"),
                    linear_num_value_heads=div("linear_num_value_heads"))
    if getattr(args, "num_experts", 0):
        div("num_experts")
        over["shared_expert_intermediate_size"] = div("shared_expert_intermediate_size")
    return dataclasses.replace(args, **over)


def local_vocab(vocab_size: int, size: int) -> int:
    """Rows of the vocabulary head per rank (padded so that every rank has as many)."""
    return ceil_div(vocab_size, size)


def take_shards(weights: dict[str, mx.array], args, shard: Shard) -> dict[str, mx.array]:
    """Every weight's local part, evaluated one at a time and copied out of its full
    tensor (a slice is a view that would keep all of it alive); each full tensor is
    popped from `weights` first, so none outlives its slice. A tied head's rows come
    from the embedding."""
    if args.tie_word_embeddings:
        weights.update(_tied_head(weights))
    local = {}
    for name in list(weights):
        part = mx.contiguous(shard_one(name, weights.pop(name), args, shard))
        mx.eval(part)
        local[name] = part
    return local


def _tied_head(weights: dict) -> dict:
    embed = next(k for k in weights if k.endswith("embed_tokens.weight"))
    prefix = embed[:-len("embed_tokens.weight")]            # "model." (under the body)
    body = prefix[:-len("model.")]
    return {f"{body}lm_head.{k.rsplit('.', 1)[1]}": v for k, v in weights.items()
            if k.startswith(f"{prefix}embed_tokens.")}


def shard_one(name: str, v: mx.array, args, shard: Shard) -> mx.array:
    parts = name.split(".")
    module, param = (parts[-2] if len(parts) > 1 else ""), parts[-1]
    if "switch_mlp" in parts:
        return shard.part(v, 0, name)                                # [E/N, out, in]
    if module == "lm_head":
        return _vocab_rows(v, args.vocab_size, shard)
    if module in _ROW_MODULES or param in _HEAD_VECTORS:
        return shard.part(v, 0, name)
    if module in _KV_MODULES:
        first, count = shard.kv_heads(args.num_key_value_heads)
        per_head = v.shape[0] // args.num_key_value_heads
        return v[first * per_head:(first + count) * per_head]
    if module in _QKV_MODULES:
        k, vd = args.key_dim, args.value_dim
        cuts = [(0, k), (k, 2 * k), (2 * k, 2 * k + vd)]
        return mx.concatenate([shard.part(v[a:b], 0, name) for a, b in cuts], axis=0)
    if module in _COLUMN_MODULES:
        if param == "bias":                    # added once, after the sum
            return v if shard.rank == 0 else mx.zeros_like(v)
        return shard.part(v, v.ndim - 1, name)
    return v


def _vocab_rows(v: mx.array, vocab_size: int, shard: Shard) -> mx.array:
    """Rows rank*Vl .. (rank+1)*Vl-1 of the head, zero rows past the vocabulary."""
    rows = local_vocab(vocab_size, shard.size)
    start, stop = shard.rank * rows, (shard.rank + 1) * rows
    real = v[min(start, vocab_size):min(stop, vocab_size)]
    missing = rows - real.shape[0]
    if not missing:
        return real
    return mx.concatenate([real, mx.zeros((missing, *v.shape[1:]), v.dtype)], axis=0)
