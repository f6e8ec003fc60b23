"""Scenarios of folders and the disk: each rank's shard read from disk, its peak memory,
and the disk prompt cache over ranks (rank_main.py)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from qwen_fixtures import build_model, random_weights, tiny_config
from scenarios import CONFIG, PROMPT, _greedy

from engine.config import EngineConfig
from engine.core.runner import Runner

# ---- loading each rank's shard from a folder -----------------------------------------

def write_folders(root) -> dict:
    """The folders the disk scenario loads: an MLX 4-bit Llama, an HF bf16 Qwen3.5 MoE
    (experts one by one, conv [C, 1, K], norms as w - 1)."""
    from qwen_fixtures import write_hf_folder
    from tiny_models import write_tiny_llama
    cfg = tiny_config("qwen3_5_moe")
    return {"llama_q4": write_tiny_llama(root / "llama_q4", quantized=True, seed=5),
            "qwen_hf": write_hf_folder(root / "qwen_hf", cfg, random_weights(cfg, seed=2))}


def disk(group, folder) -> dict | None:
    """All logits of PROMPT from each folder of write_folders(folder / "models")."""
    from engine.distributed.cluster import load_shard_bundle
    from engine.loading.model_bundle import load_bundle
    config = EngineConfig(page_size=4, num_pages=64)
    out = {}
    for name in ("llama_q4", "qwen_hf"):
        path = folder / "models" / name
        if group is None:
            bundle = load_bundle(path, config)
        else:
            bundle = load_shard_bundle(path, config, group)
        # bf16 weights widened (exactly) to float32: the comparison is of the slicing,
        # not of bf16 partial sums (each rank rounds its part before the all_sum).
        bundle.model.set_dtype(mx.float32)
        out[name] = np.array(Runner(bundle.model, config).full_logits(PROMPT))
    return out if group is None or group.rank() == 0 else None


def write_wide_llama(root):
    """A float32 Llama of ~26 MB: big enough for its load's peak memory to show."""
    from tiny_models import tiny_llama_config, write_tiny_llama
    config = tiny_llama_config("llama", hidden_size=256, intermediate_size=1024,
                               num_hidden_layers=4, vocab_size=4096, head_dim=64)
    return write_tiny_llama(root / "wide", seed=7, config=config)


def load_memory(group, folder) -> dict | None:
    """The peak memory of reading the wide Llama folder (whole, or this rank's shard;
    the loader's step only: the CPU layout after it copies every weight once), with
    the model's logits and its bytes."""
    from mlx.utils import tree_flatten

    from engine.distributed.sharding import load_sharded
    from engine.loading.loader import load_model
    config = EngineConfig(page_size=4, num_pages=64)
    path = folder / "models" / "wide"
    mx.reset_peak_memory()
    model = load_model(path).model if group is None else load_sharded(path, group).model
    peak = mx.get_peak_memory()
    size = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    stats = np.array([peak, size])
    if group is not None:              # every rank's, gathered to rank 0
        stats = np.array(mx.distributed.all_gather(mx.array(stats[None].astype(np.float32)),
                                                   group=group))
    logits = np.array(Runner(model, config).full_logits(PROMPT))
    if group is not None and group.rank() != 0:
        return None
    return {"stats": stats.reshape(-1, 2), "logits": logits}


# ---- the disk prompt cache: every rank's part of a turn in rank 0's files ------------

def write_float_qwen(root):
    """A float32 Qwen3.5 MoE folder (DeltaNet heads 4/8)."""
    import json

    from mlx.utils import tree_flatten
    from qwen_fixtures import write_tokenizer
    cfg = tiny_config("qwen3_5_moe")
    cfg["text_config"].update(linear_num_key_heads=4, linear_num_value_heads=8)
    model = build_model(cfg, random_weights(cfg, seed=4))
    folder = root / "qwen_f32"
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(folder)
    return folder


def engine_disk(group, folder) -> dict | None:
    """Turn 1 in one engine, which writes it to the disk cache as it closes; turn 2 in
    a new engine (the same ranks), which loads it from disk instead of reading it."""
    import dataclasses

    from engine.core.engine import Engine
    from engine.distributed import cluster as dist
    from engine.distributed.follower import follow
    config = dataclasses.replace(CONFIG, cache_dir=str(folder / "cache"))
    path = folder / "models" / "qwen_f32"
    c = dist.process_cluster() if group is not None and group.size() > 1 else None
    if c is not None and c.rank != 0:
        bundle = dist.load_shard_bundle(path, config, group)
        for _ in range(2):
            follow(bundle.model, config, group)
        c.done()              # rank 0 may end first: its closing heartbeat is no loss
        return None
    dist.join(c)
    try:
        with Engine.load(path, config) as engine:
            first = engine.generate([PROMPT], _greedy(6))[0]
        follow_up = PROMPT + list(first.token_ids) + [21, 22, 23]
        with Engine.load(path, config) as engine:
            second = engine.generate([follow_up], _greedy(6))[0]
    finally:
        dist.join(None)
    return {"first": np.array(first.token_ids), "second": np.array(second.token_ids),
            "cached": np.array(second.stats.cached_tokens)}
