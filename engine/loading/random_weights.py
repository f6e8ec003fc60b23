"""A model of a given config.json with random quantized weights.

For speed measurements (engine/bench/synthetic.py: full-size shapes whose checkpoints
cannot travel) and for the warm-up's workers (engine/core/warm_up_worker.py: a shallow
copy of the model being loaded, whose forwards compile the same kernels). Random
weights route tokens almost uniformly over experts, like real prefill; decode speed
does not depend on the values.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten


def _random_like(name: str, p: mx.array) -> mx.array:
    """Random values of p's shape; bf16 like a shipped checkpoint (A_log stays fp32)."""
    bf16 = mx.bfloat16
    if p.dtype == mx.uint32:                     # packed 4/8-bit weights
        return mx.random.randint(0, 2**31 - 1, p.shape).astype(mx.uint32) * 2 + 1
    if name.endswith(".scales"):
        return mx.random.uniform(0.002, 0.004, p.shape).astype(bf16)
    if name.endswith(".biases"):
        return mx.full(p.shape, -0.024, bf16)
    if "norm" in name:
        return mx.ones(p.shape, bf16)
    if name.endswith("A_log"):
        return mx.random.uniform(0.0, 2.0, p.shape)
    return (mx.random.normal(p.shape) * 0.02).astype(bf16)


def random_model(config: dict, seed: int = 0):
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
    mx.eval(model.parameters())
    return model
