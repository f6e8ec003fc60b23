"""``python -m engine.bench.profile_ops``: operations one decode step dispatches, ours vs mlx-lm.

Decode is launch-bound in MLX: each primitive in a step's graph is (at least) one
kernel launch. This counts the primitives of one decode step of the Qwen3.5-35B-A3B
layer layout (40 layers, full attention every 4th; small widths, since the count does
not depend on them), for both engines, in total and per layer kind.
"""
from __future__ import annotations

import argparse
import copy
import io
import re

import mlx.core as mx
import numpy as np

from engine.bench.synthetic import QWEN3_5_TOY, SMOLLM2_135M
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.sequence import Sequence
from engine.models.base import fuse_projections

# Primitives that only relabel memory (views): they launch nothing on the GPU.
VIEWS = {"Broadcast", "Reshape", "ExpandDims", "Squeeze", "Transpose", "Slice", "Flatten",
         "Unflatten", "StopGradient", "Split", "AsStrided"}


def count_ops(*outputs: mx.array) -> int:
    """Primitives of the graph that do work (views excluded)."""
    dot = io.StringIO()
    mx.export_to_dot(dot, *outputs)
    names = re.findall(r'label ="?([A-Za-z_]+)[^"]*"?, shape=rectangle', dot.getvalue())
    return sum(1 for n in names if n not in VIEWS)


def qwen3_5_layout(num_layers: int) -> dict:
    config = copy.deepcopy(QWEN3_5_TOY)
    config["text_config"].update(num_hidden_layers=num_layers, full_attention_interval=4)
    return config


def llama_layout(num_layers: int) -> dict:
    """The built-in model's layout (SmolLM2-135M: 4-bit, group 32) at toy widths."""
    return {**SMOLLM2_135M, "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 1024, "num_hidden_layers": num_layers}


# name -> (config of n layers, layers in one repeating block, layers of the real model, words)
LAYOUTS = {
    "qwen3.5": (qwen3_5_layout, 4, 40, "40 layers: 30 Gated DeltaNet + 10 gated attention, MoE"),
    "llama": (llama_layout, 1, 30, "30 Llama layers, the built-in SmolLM2-135M"),
}


def ours(config: dict, batch: int, context: int) -> int:
    from engine.bench.synthetic import synthetic_model_from_config
    model = synthetic_model_from_config(config)
    fuse_projections(model)               # as the engine runs it (engine/loading/model_bundle.py)
    runner = Runner(model, EngineConfig(max_num_seqs=batch, page_size=16, num_pages=256))
    seqs = []
    for b in range(batch):
        s = Sequence(b, list(range(context)), None)
        s.pages, s.slot, s.num_computed = list(range(1 + 8 * b, 9 + 8 * b)), b, context - 1
        seqs.append(s)
    logits = runner.decode(seqs)
    return count_ops(logits, *runner.cache_arrays())


def peer(config: dict, batch: int, context: int) -> int:
    from mlx_lm.models.cache import make_prompt_cache

    from engine.bench.peer import peer_model
    from engine.bench.synthetic import synthetic_model_from_config
    model = peer_model(synthetic_model_from_config(config), config)
    cache = make_prompt_cache(model)
    mx.eval(model(mx.zeros((batch, context - 1), dtype=mx.int32), cache=cache))
    logits = model(mx.zeros((batch, 1), dtype=mx.int32), cache=cache)
    states = [a for c in cache for a in (c.state if isinstance(c.state, list) else [c.state])
              if isinstance(a, mx.array)]
    return count_ops(logits, *states)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.profile_ops", description=__doc__)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--layout", choices=sorted(LAYOUTS), default="qwen3.5")
    args = p.parse_args(argv)
    layout, block, full, words = LAYOUTS[args.layout]
    rows = []
    for name, fn in (("tandem", ours), ("mlx-lm", peer)):
        n1, n2, n_full = (fn(layout(n), args.batch, args.context)
                          for n in (block, 2 * block, full))
        per_block = n2 - n1
        rows.append((name, n_full, per_block, n1 - per_block))
    print(f"ops (views excluded) in one decode step on {mx.default_device()}, B={args.batch}, "
          f"context {args.context} ({words})")
    print(f"| engine | ops per step | ops per {block}-layer block | outside the layers |")
    print("|---|---|---|---|")
    for name, total, block, rest in rows:
        print(f"| {name} | {total} | {block:.0f} | {rest:.0f} |")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
