"""``python -m engine.bench.profile_ops``: operations one decode step dispatches, ours vs mlx-lm.

Decode is launch-bound in MLX: each primitive in a step's graph is (at least) one
kernel launch. This counts the primitives of one decode step of the Qwen3.5-35B-A3B
layer layout (40 layers, full attention every 4th; small widths, since the count does
not depend on them), for both engines, in total and per layer kind, on two paths:

- cpu: the graph as built here, on the CPU (mx.fast ops as their fallback graphs,
  no custom kernels): what the CPU runs.
- gpu: the graph a CUDA step builds: mx.fast's rms_norm/layer_norm/rope/sdpa are one
  primitive each and our kernels launch (KernelSet backend 'count'); both are built
  as stand-ins here (kernels/stand_in.py), each counted as one launch. mlx-lm on
  CUDA takes its plain-ops paths (its kernels are Metal-only), so only mx.fast changes.
- device (not in "both"): the graph as built on this machine's default device with the
  kernels its self-test passes, no stand-ins. On the GPU machine this counts the real
  GPU graph: the check that the gpu path's stand-ins count what CUDA builds.

--chunk 16,64 counts one prompt-chunk forward of each length instead (Qwen3.5 layout,
ours only; engine/bench/chunk_ops.py): in total, per block, and per part of a layer
(linear attention, full attention, MoE block, the layer-level norms, the rest).

Counted: every primitive that launches work; views (and Depends, an ordering edge)
are excluded. Contiguous is counted although it copies only non-contiguous inputs.
"""
from __future__ import annotations

import argparse
import copy
import io
import re
from collections import Counter
from contextlib import nullcontext

import mlx.core as mx
import numpy as np

from engine.bench.counted_model import counted_model
from engine.bench.synthetic import QWEN3_5_TOY, SMOLLM2_135M
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.sequence import Sequence
from kernels.kernel_set import KernelSet
from kernels.stand_in import COUNT, gpu_graph

# Primitives that only relabel memory (views) or order work: they launch nothing on the GPU.
# View too where the item size stays (the engine views int32 ids as uint32 only).
VIEWS = {"Broadcast", "Reshape", "ExpandDims", "Squeeze", "Transpose", "Slice", "Flatten",
         "Unflatten", "StopGradient", "Split", "AsStrided", "Depends", "View"}
PATHS = ("cpu", "gpu")          # "device": only when asked for


def ops_by_primitive(*outputs: mx.array) -> Counter:
    """Primitive name -> how many of the graph's nodes have it (views excluded)."""
    dot = io.StringIO()
    mx.export_to_dot(dot, *outputs)
    names = re.findall(r'label ="?([A-Za-z_]+)[^"]*"?, shape=rectangle', dot.getvalue())
    return Counter(n for n in names if n not in VIEWS)


def count_ops(*outputs: mx.array) -> int:
    """Primitives of the graph that do work (views excluded)."""
    return sum(ops_by_primitive(*outputs).values())


def qwen3_5_layout(num_layers: int, hidden: int = 128) -> dict:
    config = copy.deepcopy(QWEN3_5_TOY)
    # The real router's shape class: E a multiple of 32 (256 there), top-8, so the
    # routing kernel applies on the gpu path as it does on the real model.
    config["text_config"].update(num_hidden_layers=num_layers, full_attention_interval=4,
                                 num_experts=32, num_experts_per_tok=8, hidden_size=hidden)
    return config


def qwen3_5_counted_layout(num_layers: int) -> dict:
    """The layout the step is counted at: a hidden size of the real one's class (a
    multiple of 1,024), so a B=1 step's input norms go inside their projections
    (kernels/qmv_normed) as on the real model's 2,048."""
    return qwen3_5_layout(num_layers, hidden=1024)


def llama_layout(num_layers: int) -> dict:
    """The built-in model's layout (SmolLM2-135M: 4-bit, group 32) at toy widths; the
    real head_dim (64), so the paged-attention kernel applies as on the real model."""
    return {**SMOLLM2_135M, "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "vocab_size": 1024, "num_hidden_layers": num_layers}


# name -> (config of n layers, layers in one repeating block, layers of the real model, words)
LAYOUTS = {
    "qwen3.5": (qwen3_5_counted_layout, 4, 40, "40 layers: 30 Gated DeltaNet + 10 gated attention, MoE"),
    "llama": (llama_layout, 1, 30, "30 Llama layers, the built-in SmolLM2-135M"),
}


def step_ops(build, path: str) -> Counter:
    """Ops of the decode step `build(ledger)` returns the outputs of, on `path`."""
    with gpu_graph() if path == "gpu" else nullcontext() as ledger:
        outputs = build(ledger)
        ops = ops_by_primitive(*outputs)
    if ledger is not None:      # each stand-in is one launch, named by what it stands for
        ops.update({f"[{name}]": n for name, n in ledger.calls.items()})
    return ops


def ours(config: dict, batch: int, context: int, path: str = "cpu") -> Counter:
    model = counted_model(config, path)
    # The gpu path's decode runs through mx.compile, as on a GPU (engine/core/compiled_forward.py):
    # its fused elementwise chains count as one launch each.
    runner = Runner(model, EngineConfig(max_num_seqs=batch, page_size=16, num_pages=256,
                                        compile_decode=path != "cpu"))
    mx.eval(runner.cache_arrays())        # as in the engine: the pools exist before a step
    seqs = []
    for b in range(batch):
        s = Sequence(b, list(range(context)), None)
        s.pages, s.slot, s.num_computed = list(range(1 + 8 * b, 9 + 8 * b)), b, context - 1
        seqs.append(s)
    return step_ops(lambda _: [runner.decode(seqs), *runner.cache_arrays()], path)


def peer(config: dict, batch: int, context: int, path: str = "cpu") -> Counter:
    from mlx_lm.models.cache import make_prompt_cache

    from engine.bench.peer import peer_model
    from engine.bench.synthetic import synthetic_model_from_config
    model = peer_model(synthetic_model_from_config(config), config)
    cache = make_prompt_cache(model)

    def build(ledger):
        mx.eval(model(mx.zeros((batch, context - 1), dtype=mx.int32), cache=cache))
        if ledger is not None:
            ledger.clear()                # count the decode step only, not the prefill
        logits = model(mx.zeros((batch, 1), dtype=mx.int32), cache=cache)
        states = [a for c in cache for a in (c.state if isinstance(c.state, list) else [c.state])
                  if isinstance(a, mx.array)]
        return [logits, *states]
    return step_ops(build, path)


def measure(fn, layout, block: int, full: int, batch: int, context: int, path: str):
    """(ops per step, ops per block by primitive, ops outside the layers, the step's
    Contiguous ops: counted, but they copy only a strided input, else launch nothing)."""
    n1, n2, n_full = (fn(layout(n), batch, context, path) for n in (block, 2 * block, full))
    per_block = n2.copy()
    per_block.subtract(n1)
    rest = sum(n1.values()) - sum(per_block.values())
    return sum(n_full.values()), per_block, rest, n_full["Contiguous"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.profile_ops", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--layout", choices=sorted(LAYOUTS), default="qwen3.5")
    p.add_argument("--path", choices=PATHS + ("both", "device"), default="both")
    p.add_argument("--by-primitive", action="store_true",
                   help="also list one block's ops by primitive, ours next to mlx-lm's")
    p.add_argument("--chunk", type=_lengths, metavar="T,T,...",
                   help="count prompt-chunk forwards of these lengths instead of decode")
    args = p.parse_args(argv)
    if args.chunk:
        from engine.bench.chunk_report import print_chunks
        print_chunks(args.chunk, "gpu" if args.path == "both" else args.path,
                     args.by_primitive, decode_ops=lambda path: sum(ours(
                         qwen3_5_layout(40), args.batch, args.context, path).values()))
        return 0
    layout, block, full, words = LAYOUTS[args.layout]
    paths = PATHS if args.path == "both" else (args.path,)
    print(f"ops (views excluded) in one decode step, B={args.batch}, context {args.context} "
          f"({words}); built on {mx.default_device()}")
    print(f"| path | engine | ops per step | ops per {block}-layer block | outside the layers "
          "| of the step: Contiguous |")
    print("|---|---|---|---|---|---|")
    blocks = {}
    for path in paths:
        for name, fn in (("tandem", ours), ("mlx-lm", peer)):
            total, per_block, rest, copies = measure(fn, layout, block, full, args.batch,
                                                     args.context, path)
            blocks[path, name] = per_block
            print(f"| {path} | {name} | {total} | {sum(per_block.values())} | {rest} "
                  f"| {copies} |", flush=True)
    if args.by_primitive:
        for path in paths:
            _print_by_primitive(path, blocks[path, "tandem"], blocks[path, "mlx-lm"])
    print(f"\nsampling a decode step of B={args.batch} after the forward (ops of sample_batch: "
          "the CPU's uncompiled, its bisection one mx.compile; a GPU's compiled, its fused "
          "elementwise chains one launch each)")
    print("| sampling | ops (CPU) | GPU path (compiled, kernels/top_p_cut) |\n|---|---|---|")
    for label, params in SAMPLINGS:
        print(f"| {label} | {sampler_ops(args.batch, params)} "
              f"| {sampler_ops(args.batch, params, gpu=True)} |", flush=True)
    return 0


def _lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"chunk lengths are integers like 16,64, not {text!r}") from None
    if not lengths or min(lengths) < 2:
        raise argparse.ArgumentTypeError("a chunk has at least 2 tokens (1 is a decode step)")
    return lengths


# What a step samples with: greedy (the benches), and the app's defaults.
SAMPLINGS = (("greedy", dict(temperature=0.0)), ("temperature 0.7", dict(temperature=0.7)),
             ("temperature 0.7, top-p 0.95 (the app's defaults)",
              dict(temperature=0.7, top_p=0.95)))


def sampler_ops(batch: int, params: dict, vocab: int = 248320, gpu: bool = False) -> int:
    """Ops `sample_batch` adds to a decode step of `batch` rows at `params`, as the CPU
    runs it (uncompiled, bisection's steps counted one by one); gpu: as a GPU does, through
    mx.compile with the kernel set it loads (kernels/top_p_cut as one counted launch)."""
    from engine.core.sampler import RowSampler, sample_batch
    from engine.sampling_params import SamplingParams
    logits = mx.zeros((batch, vocab))
    mx.eval(logits)
    states = [RowSampler(SamplingParams(**params)) for _ in range(batch)]
    if gpu:
        with gpu_graph():
            return count_ops(sample_batch(logits, states, KernelSet(COUNT), compiled=True))
    mx.disable_compile()
    try:
        return count_ops(sample_batch(logits, states, compiled=False))
    finally:
        mx.enable_compile()


def _print_by_primitive(path: str, ours_: Counter, peer_: Counter) -> None:
    print(f"\n{path} path, one block by primitive ([name]: a stand-in launch)")
    print("| primitive | tandem | mlx-lm |\n|---|---|---|")
    for name in sorted(set(ours_) | set(peer_), key=lambda n: -max(ours_[n], peer_[n])):
        if ours_[name] or peer_[name]:
            print(f"| {name} | {ours_[name]} | {peer_[name]} |")


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
