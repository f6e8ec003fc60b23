"""How many experts a decode step of a synthetic MoE model reads: is the bench's workload
the one a real model gives?

    PYTHONPATH=. python -m engine.bench.synthetic_routing [--layers 4] [--batch 32]
        [--steps 24] [--small-experts]

A decode step reads every expert that some row routes to. A trained model spreads B
different conversations over many of its 256 experts (load balancing); if B rows were
routed independently and uniformly, a layer would read 256 * (1 - (1 - 8/256)^B) experts
(~163 at B=32). This drives the engine through its public API (`Engine.generate`, B
prompts of 32 random ids, greedy and the app's sampling) on a synthetic model of
engine/bench/synthetic.py's Qwen3.5 layout, cut to --layers layers (--small-experts:
expert width 64, so it fits a CPU quickly; routing does not depend on the width), and
counts, per MoE layer and decode step, the distinct experts its B rows pick (the
router's top-k of its own logits, recomputed beside the forward), and the distinct
tokens the rows emitted. It runs uncompiled (compile_decode off), so the hook sees
each forward. Counts, not timings: any machine.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics

import mlx.core as mx
import numpy as np

from engine.bench.suite import _prompt, decode_sampling
from engine.bench.synthetic import QWEN3_5_35B_A3B, IdTokenizer, synthetic_model_from_config
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.loading.model_bundle import InMemoryModel
from engine.models import moe
from engine.sampling_params import SamplingParams

SETTINGS = {"greedy": {}, "app sampling": decode_sampling("app")}    # the app's chat defaults


def uniform_expectation(num_experts: int, top_k: int, rows: int) -> float:
    """Distinct experts that `rows` independent uniform top-k draws pick, on average."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** rows)


@contextlib.contextmanager
def counted_routing(rows: int):
    """Within: every SparseMoeBlock forward over exactly `rows` rows appends the number of
    distinct experts its rows route to (the block's own router logits, top-k)."""
    counts: list[int] = []
    original = moe.SparseMoeBlock.__call__

    def counting(block, x, residual=None, route_rows=None, gates=None):
        flat = x.reshape(-1, x.shape[-1])
        if flat.shape[0] == rows:
            num_experts = block.num_experts
            logits = (block.gates.joined_output(flat)[:, :num_experts] if "gates" in block
                      else block.gate(flat))
            idx = mx.argpartition(logits, kth=-block.top_k, axis=-1)[:, -block.top_k:]
            counts.append(len(np.unique(np.array(idx))))
        return original(block, x, residual, route_rows, gates)

    moe.SparseMoeBlock.__call__ = counting
    try:
        yield counts
    finally:
        moe.SparseMoeBlock.__call__ = original


def config_for(layers: int, small_experts: bool) -> dict:
    text = dict(QWEN3_5_35B_A3B["text_config"], num_hidden_layers=layers)
    if small_experts:
        text.update(moe_intermediate_size=64, shared_expert_intermediate_size=64,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    linear_num_key_heads=4, linear_num_value_heads=8)
    return {"model_type": QWEN3_5_35B_A3B["model_type"], "text_config": text}


def measure(config: dict, batch: int, steps: int) -> dict[str, tuple[list[int], list[int]]]:
    """{setting: (distinct experts per layer and step, distinct tokens per step)} over the
    decode steps after the prompts are read."""
    text = config["text_config"]
    model = synthetic_model_from_config(config)
    engine = Engine.from_model(InMemoryModel(model, IdTokenizer(), config, "routing"),
                               EngineConfig(compile_decode=False, max_num_seqs=batch))
    prompts = [_prompt(32, text["vocab_size"], s) for s in range(batch)]
    out = {}
    try:
        for name, sampling in SETTINGS.items():
            with counted_routing(batch) as counts:
                done = engine.generate(prompts, SamplingParams(max_tokens=steps, **sampling))
            # the last steps: every row decoding (the first ones still read prompts)
            tail = counts[-(steps // 2) * text["num_hidden_layers"]:]
            tokens = [len({c.token_ids[t] for c in done}) for t in range(steps // 2, steps)]
            out[name] = (tail, tokens)
    finally:
        engine.close()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--small-experts", action="store_true")
    args = ap.parse_args(argv)
    config = config_for(args.layers, args.small_experts)
    text = config["text_config"]
    expected = uniform_expectation(text["num_experts"], text["num_experts_per_tok"], args.batch)
    print(f"# {args.layers} layers of the Qwen3.5-35B-A3B layout (random weights), B={args.batch}; "
          f"independent uniform routing would read {expected:.0f} of {text['num_experts']} "
          "experts a layer")
    for name, (experts, tokens) in measure(config, args.batch, args.steps).items():
        print(f"{name}: distinct experts a layer and step median {statistics.median(experts)} "
              f"(min {min(experts)}, max {max(experts)}); distinct tokens a step "
              f"median {statistics.median(tokens)} of {args.batch}")


if __name__ == "__main__":
    main()
