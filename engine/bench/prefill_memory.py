"""Peak memory of one long prefill in a process that holds only one engine's model.

    PYTHONPATH=. python -m engine.bench.prefill_memory --engine tandem|mlx-lm
        [--model synthetic:qwen3.5-35b-a3b] [--prompt 16384] [--prefill-chunk 512]
        [--pipeline auto|on|off] [--bounded on|off]

`python -m engine bench` measures peak memory with both models resident (mlx-lm's is
built from our arrays, plus contiguous copies of the parts our loader joins), so its
peaks say little about either. Here one process builds the weights, hands them to ONE
engine (Tandem's Engine, or mlx-lm's model through engine/bench/peer.py, after which our
model and engine are dropped), then reads one prompt of --prompt tokens to its first
token: the weights' bytes resident, MLX's peak above them, and the seconds. Run it once
per engine, each in its own process, for the comparison (issue 23, item 4).

--pipeline off runs Tandem's steps one at a time (EngineConfig.pipeline_steps): on a GPU
the engine queues chunk n+1 before it reads chunk n back, and MLX's CUDA backend holds
every buffer a committed graph used until the GPU finishes it, so two chunks' attention
scores may be resident at once. The peak with and without it tells how much that is.
--bounded off queues each chunk's forward whole (EngineConfig.bounded_prefill=False): on
CUDA a long chunk is otherwise queued a layer range at a time, at most two on the device
(engine/core/bounded_prefill.py).
"""
from __future__ import annotations

import argparse
import gc
import random
import time

import mlx.core as mx

from engine.bench.engine_start import open_engine
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.cuda_graphs import graph_limit_setting
from engine.sampling_params import SamplingParams

GB = 1e9
WARM_TOKENS = 512   # a first, shorter prompt before the measured one


PIPELINE = {"auto": None, "on": True, "off": False}


def _engine(model: str, prompt: int, chunk: int, pipeline: bool | None = None,
            bounded: bool = True) -> Engine:
    config = EngineConfig(max_num_seqs=1, page_size=16, num_pages=-(-(prompt + 64) // 16) + 4,
                          prefill_chunk=chunk, max_context=prompt + 64, prefix_cache=False,
                          pipeline_steps=pipeline, bounded_prefill=bounded)
    return open_engine(model, config)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.prefill_memory",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=("tandem", "mlx-lm"), required=True)
    p.add_argument("--model", default="synthetic:qwen3.5-35b-a3b")
    p.add_argument("--prompt", type=int, default=16384, help="prompt tokens")
    p.add_argument("--prefill-chunk", type=int, default=512, help="Tandem's chunk")
    p.add_argument("--pipeline", choices=tuple(PIPELINE), default="auto",
                   help="Tandem's step pipelining (auto: the engine's default, on a GPU only)")
    p.add_argument("--bounded", choices=("on", "off"), default="on",
                   help="EngineConfig.bounded_prefill (on: the engine's default)")
    args = p.parse_args(argv)
    engine = _engine(args.model, args.prompt, args.prefill_chunk, PIPELINE[args.pipeline],
                     args.bounded == "on")
    vocab = engine.vocab_size
    ids = [random.Random(args.prompt).randrange(10, vocab - 1) for _ in range(args.prompt)]
    if args.engine == "mlx-lm":
        from engine.bench.peer import Peer, peer_model
        peer = Peer(peer_model(engine.bundle.model, engine.bundle.config))
        engine.close()
        del engine
        gc.collect()
        mx.clear_cache()
        def run(prompt):
            return peer.prefill_seconds(prompt)
    else:
        def run(prompt):
            return engine.generate([prompt], SamplingParams(max_tokens=1))[0].stats.ttft_s
    run(ids[:WARM_TOKENS])          # kernels compiled (a GPU's first shapes), untimed
    resident = mx.get_active_memory()
    mx.reset_peak_memory()
    t0 = time.perf_counter()
    seconds = run(ids)
    wall = time.perf_counter() - t0
    peak = mx.get_peak_memory()
    setup = "" if args.engine != "tandem" else (
        f"{args.prefill_chunk}-token chunks, pipeline {args.pipeline}, bounded {args.bounded}, ")
    print(f"{args.engine}: {args.prompt}-token prefill of {args.model} on {mx.default_device()} "
          f"({setup}{graph_limit_setting()}): "
          f"resident before {resident / GB:.2f} GB, peak {peak / GB:.2f} GB "
          f"(+{(peak - resident) / GB:.2f} GB above it), first token {seconds:.2f} s "
          f"(wall {wall:.2f} s)")
    if args.engine == "tandem":
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
