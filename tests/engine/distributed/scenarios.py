"""The work of each distributed test, written once for one process and for N ranks.

A scenario takes the group (None: one process, no sharding) and returns named
numpy arrays (rank 0's; other ranks return None)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from qwen_fixtures import Rows, build_model, random_weights, tiny_config
from tiny_models import tiny_llama, tiny_llama_config

from engine.config import EngineConfig
from engine.core.runner import Runner

PROMPT = [5, 17, 42, 99, 3, 250, 7, 11, 64, 128, 200, 31, 8]


def tiny_models() -> dict:
    """The test's models, float32, random (the same on every rank: seeded)."""
    qcfg = tiny_config("qwen3_5_moe")
    return {"llama": tiny_llama(tiny_llama_config("qwen2", num_attention_heads=4,
                                                  num_key_value_heads=2)),
            "llama_tied": tiny_llama(tiny_llama_config("llama")),
            "qwen": build_model(qcfg, random_weights(qcfg, seed=1))}


def _local(model, group):
    if group is None or group.size() == 1:
        return model
    from engine.distributed.sharding import shard_model
    return shard_model(model, group)


def logits(group) -> dict | None:
    """All logits of one prompt (one forward) and of a ragged batch of three rows over
    two forwards (prefill, then a decode step), per model."""
    out = {}
    for name, model in tiny_models().items():
        model = _local(model, group)
        runner = Runner(model, EngineConfig(page_size=4, num_pages=64, max_num_seqs=4))
        out[f"{name}_full"] = np.array(runner.full_logits(PROMPT))
        rows = Rows(model)
        for s in range(3):
            rows.start(s)
        first = rows.forward({0: PROMPT[:5], 1: PROMPT[:9], 2: PROMPT[:3]})
        second = rows.forward({0: [9], 1: [10], 2: [11]})
        out[f"{name}_prefill"] = np.array(first.astype(mx.float32))
        out[f"{name}_decode"] = np.array(second.astype(mx.float32))
    return out if group is None or group.rank() == 0 else None
