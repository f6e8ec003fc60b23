"""Where a decode step's time goes: host graph building, and each GPU kernel.

    PYTHONPATH=. python -m engine.bench.kernel_time [--model synthetic:NAME] [--batch 1,8]
        [--steps 8] [--sampling greedy|app] [--peer] [--build-only]

For each batch size: the median wall time of a synchronous decode forward (a Runner
on this thread, `mx.eval` of its logits and cache; plain and compiled,
engine/core/compiled_forward.py), the host time to build one step's graph in Python
(no evaluation), and, where PyTorch is installed (the GPU machine's image has it), the
CUDA kernels the step launched, through torch.profiler (CUPTI sees every kernel in the
process, MLX's included): total GPU kernel time per step, kernels per step, and the
top kernels by time. GPU kernel time well under the wall time means the step waits on
the host. --sampling app: each step samples its rows at the app's chat defaults
(engine/settings_spec.py, through engine/core/sampler.py and the model's kernel set), not
by argmax. --peer: mlx-lm's B=1 step on the same weights. --build-only: only the host
graph-building time (runs on any machine, e.g. a 4-layer slice: --layers 4).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import mlx.core as mx
import numpy as np

from engine.bench.runs import add_moe_max_pairs_arg, apply_moe_max_pairs
from engine.bench.suite import decode_sampling
from engine.bench.synthetic import SYNTHETIC, synthetic_model_from_config
from engine.config import EngineConfig
from engine.core.runner import Runner
from engine.core.sampler import RowSampler, sample_batch
from engine.cuda_graphs import graph_limit_setting
from engine.models.base import fuse_projections, kernel_set_of, use_kernels
from engine.sampling_params import SamplingParams
from kernels.bench.common import cuda_kernel_events

CONTEXT = 64
PAGES_PER_ROW = 40


def _step(runner: Runner, batch: int, compiled: bool, evaluate: bool = True,
          sampling: SamplingParams | None = None):
    """A decode forward of `batch` rows at CONTEXT tokens, then argmax (or `sampling`'s
    draw), as a callable."""
    rows = [(list(range(1 + b * PAGES_PER_ROW, 1 + (b + 1) * PAGES_PER_ROW)), b, CONTEXT, 1)
            for b in range(batch)]
    view = runner.build_view(rows, 1, stable=compiled)
    tokens = mx.array(np.random.randint(10, 1000, (batch, 1)), mx.int32)
    samplers = [RowSampler(sampling) for _ in range(batch)] if sampling else None
    kernels = kernel_set_of(runner.model)

    def run():
        logits, arrays = runner.forward(tokens, view, compiled=compiled)
        if evaluate:
            ids = (sample_batch(logits, samplers, kernels) if samplers
                   else logits[:, -1, :].argmax(-1))
            mx.eval(ids, arrays)
    return run


def _median_s(fn, n: int = 12, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def kernel_table(fn, steps: int, label: str, top: int = 20) -> None:
    """Print the CUDA kernels `fn` launches per call (torch.profiler), if torch is here."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print(f"{label}: no torch here, no kernel table")
        return
    fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
    kernels: dict[str, list[float]] = {}
    for e in cuda_kernel_events(prof):
        kernels.setdefault(e.name[:80], []).append(e.time_range.end - e.time_range.start)
    busy = sum(sum(v) for v in kernels.values()) / steps
    count = sum(len(v) for v in kernels.values()) / steps
    print(f"\n{label}: GPU kernel time {busy / 1e3:.2f} ms/step, {count:.0f} kernels/step")
    for name, ds in sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"{sum(ds) / steps / 1e3:8.3f} ms {len(ds) / steps:6.1f}x "
              f"{sum(ds) / len(ds):8.1f} us  {name}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="synthetic:qwen3.5-35b-a3b")
    p.add_argument("--batch", default="1,8")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--layers", type=int, default=0, help="only the first N layers")
    p.add_argument("--sampling", choices=("greedy", "app"), default="greedy")
    p.add_argument("--peer", action="store_true")
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--top", type=int, default=20,
                   help="kernels listed a table, by time (every kind of a B=1 step: ~60)")
    add_moe_max_pairs_arg(p)    # the kernels' tuning switches: each variant's GPU time
    args = p.parse_args(argv)
    apply_moe_max_pairs(args)
    print(f"# {graph_limit_setting()} (CUDA graphs a step: engine/cuda_graphs.py)", flush=True)
    config = copy.deepcopy(SYNTHETIC[args.model.removeprefix("synthetic:")])
    if args.layers:
        (config.get("text_config") or config)["num_hidden_layers"] = args.layers
    model = synthetic_model_from_config(config)
    fuse_projections(model)
    peer = None
    if args.peer:
        from engine.bench.peer import peer_model
        peer = peer_model(model, config)
    if not args.build_only:
        from kernels import select_kernels
        use_kernels(model, select_kernels(True))
    app = decode_sampling(args.sampling)       # the bench's: the app's chat defaults
    sampling = SamplingParams(**app) if app else None
    batches = [int(b) for b in args.batch.split(",")]
    cfg = dict(max_num_seqs=max(batches), page_size=16, fixed_shapes=True,
               num_pages=max(batches) * PAGES_PER_ROW + 8, max_context=4096)
    runners = {c: Runner(model, EngineConfig(**cfg, compile_decode=c)) for c in (False, True)}
    for B in batches:
        build = _median_s(_step(runners[False], B, False, evaluate=False))
        replay = _median_s(_step(runners[True], B, True, evaluate=False))
        print(f"B={B}: building one step's graph: {build * 1e3:.2f} ms in Python, "
              f"{replay * 1e3:.2f} ms replaying the compiled one", flush=True)
        if args.build_only:
            continue
        for compiled in (False, True, False, True):          # alternating
            s = _median_s(_step(runners[compiled], B, compiled, sampling=sampling))
            print(f"B={B} {'compiled' if compiled else 'plain'}: {s * 1e3:.2f} ms a step",
                  flush=True)
        for compiled in (False, True):
            kernel_table(_step(runners[compiled], B, compiled, sampling=sampling), args.steps,
                         f"B={B} {'compiled' if compiled else 'plain'}", top=args.top)
    if peer is not None and not args.build_only:
        from mlx_lm.models.cache import make_prompt_cache
        cache = make_prompt_cache(peer)
        mx.eval(peer(mx.array(np.random.randint(10, 1000, (1, CONTEXT))), cache=cache))
        token = mx.array([[7]])
        step = lambda: mx.eval(peer(token, cache=cache)[:, -1, :].argmax(-1))  # noqa: E731
        print(f"mlx-lm B=1: {_median_s(step) * 1e3:.2f} ms a step", flush=True)
        kernel_table(step, args.steps, "mlx-lm B=1")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
