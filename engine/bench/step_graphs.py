"""How many distinct graphs the engine's steps hand to MLX under a mixed load.

    PYTHONPATH=. python -m engine.bench.step_graphs --model FOLDER [--minutes 1]
        [--threads 4] [--gpu-defaults]

MLX 0.32's CUDA backend keeps a graph exec per graph shape in a cache of 400; a shape
a step makes for the first time is a miss, an instantiate of milliseconds of host time,
and by default the cache throws "Cache thrashing is happening" once it has missed twice
its capacity over the process's life (turned off by engine/cuda_graph_cache.py;
docs/RELIABILITY.md, last section). So the fewer shapes the steps make, the better. This counts the distinct graphs the step loop evaluates (each `mx.async_eval`'s
ordered operation names, shapes aside) while the soak's engine load runs
(engine/bench/soak_load.py: random prompts, follow-ups, sampling settings and cancels),
and how fast new ones still come at the end, by what the step ran: decode rows alone,
a prompt's chunk beside them whole or in pieces, prompts alone. A CUDA graph holds at
most ~100 kernels and its key ignores which kernel a node launches, so this estimates
the trend, not MLX's count. `--gpu-defaults` runs the engine as on a CUDA GPU (fixed
shapes, compiled decode and sampler, pipelined steps, chunks in 4 pieces, a step's draws
queued apart from its prompt work: StepLoop.draws_apart) on any machine. Diagnostics only: exporting every step's graph makes the steps slow.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import io
import re
import threading
import time

import mlx.core as mx

from engine.bench import soak
from engine.bench.soak_load import Tally, engine_worker
from engine.core import sampler, step_loop
from engine.core.engine import Engine

GPU_DEFAULTS = {"fixed_shapes": True, "compile_decode": True, "pipeline_steps": True,
                "chunk_pieces": 4, "warm_up": False}
_NODE = re.compile(r'label\s*=\s*"([^"]*)"')     # export_to_dot labels operations only


def graph_ops(arrays: list) -> list[str]:
    """The operation names of the graph that evaluating `arrays` runs, in order (none
    for arrays already evaluated or queued)."""
    buf = io.StringIO()
    mx.export_to_dot(buf, *[a for a in arrays if isinstance(a, mx.array)])
    return _NODE.findall(buf.getvalue())


def graph_key(ops: list[str]) -> str | None:
    """A graph's operations hashed; None where nothing is left to run."""
    return hashlib.md5("|".join(ops).encode()).hexdigest() if ops else None


def step_kind(plan) -> str:
    """What a step ran, as the distinct graphs are grouped."""
    if not plan.prefills:
        return "decode"
    if not plan.decode:
        return "prompts"
    return "chunk in pieces" if plan.span is not None else "chunk beside decode"


class StepGraphs:
    """Records each distinct graph the step loop evaluates (while installed: it wraps
    mx.async_eval and StepLoop._run for the whole process), when it first came, what
    step made it and its operations."""

    def __init__(self):
        self.first: dict[str, tuple[float, str]] = {}
        self.ops: dict[str, list[str]] = {}
        self._kind = "other"
        self._t0 = time.monotonic()
        self._saved = None

    def __enter__(self) -> StepGraphs:
        run, async_eval = step_loop.StepLoop._run, mx.async_eval
        self._saved = (run, async_eval)

        def traced_run(loop, plan, extra):
            self._kind = step_kind(plan)
            return run(loop, plan, extra)

        def counted_eval(*args):
            arrays = [a for x in args for a in (x if isinstance(x, (list, tuple)) else [x])]
            ops = graph_ops(arrays)
            key = graph_key(ops)
            if key is not None and key not in self.first:
                self.first[key] = (time.monotonic() - self._t0, self._kind)
                self.ops[key] = ops
            return async_eval(*args)

        step_loop.StepLoop._run, mx.async_eval = traced_run, counted_eval
        return self

    def __exit__(self, *exc) -> None:
        step_loop.StepLoop._run, mx.async_eval = self._saved

    def summary(self, seconds: float) -> dict:
        """Distinct graphs in all, by step kind, and those first met in the last third."""
        times = [t for t, _ in self.first.values()]
        late = sum(t >= 2 * seconds / 3 for t in times)
        return {"distinct": len(self.first),
                "by_kind": dict(collections.Counter(k for _, k in self.first.values())),
                "new_a_minute_in_the_last_third": round(late / (seconds / 3) * 60, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.step_graphs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model folder or .gguf")
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--gpu-defaults", action="store_true")
    args = p.parse_args(argv)
    config = soak.engine_config(argparse.Namespace(max_num_seqs=8, max_context=512), None)
    if args.gpu_defaults:
        config = dataclasses.replace(config, **GPU_DEFAULTS)
        sampler._on_gpu = lambda: True          # the compiled sampler, as on a GPU
        step_loop.on_cuda = lambda: True        # StepLoop.draws_apart, as on CUDA
    engine = Engine.load(args.model, config)
    try:
        with StepGraphs() as graphs:
            deadline = time.monotonic() + args.minutes * 60
            tally = Tally()
            workers = [threading.Thread(target=engine_worker, args=(engine, i, deadline, tally))
                       for i in range(args.threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    finally:
        engine.close()
    print({"minutes": args.minutes, "gpu_defaults": args.gpu_defaults,
           **graphs.summary(args.minutes * 60), "errors": tally.errors[:3]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
