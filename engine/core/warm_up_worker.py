"""One warm-up worker: a process that compiles a share of the warm-up's kernels.

Started by engine/core/parallel_warm_up.py as ``python -m engine.core.warm_up_worker``
with a JSON spec on stdin and MLX_PTX_CACHE_DIR pointing at a folder of its own. It
builds a shallow copy of the engine's model (its config.json with every kind of layer
once, random weights of the same quantization: engine/loading/random_weights.py),
prepares it as the engine does (projections joined, the engine's kernel set, a pool of
the engine's page count), runs each shape it was given once (engine/core/warm_up.py),
and prints one JSON line per shape done. MLX keeps what it compiled in the folder; the
parent copies it into the engine's cache once this process has exited cleanly.

Also here, for the engine thread: the plan (whether workers can help, how many fit,
their spec), the part that needs mlx.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from engine.config import EngineConfig
from engine.core.parallel_warm_up import shallow_config, worker_count
from engine.kernel_cache import ENV_VAR

WORKER_OVERHEAD = 1 << 30   # bytes a worker takes besides its model and pool (CUDA context)


@dataclasses.dataclass(frozen=True)
class Plan:
    spec: dict          # what each worker reads, less its shapes
    workers: int
    cache_dir: Path
    marker: Path        # written once the warm-up ran: the next start skips the workers


def plan(model: nn.Module, model_config: dict, config: EngineConfig, num_pages: int,
         kernels, shapes: list[tuple], pool_bytes: int) -> Plan | None:
    """Workers for this warm-up, or None: not CUDA, no kernel cache folder, a model
    that is not quantized (random_model's layers would not be the engine's), fewer
    than two fit, or this model's shapes were compiled into that folder before."""
    folder = os.environ.get(ENV_VAR)
    on_cuda = mx.default_device().type == mx.DeviceType.gpu and sys.platform.startswith("linux")
    quantization = quantization_of(model, model_config)
    if not folder or quantization is None or (config.warm_up_workers is None and not on_cuda):
        return None
    shallow = shallow_config(dict(model_config, quantization=quantization))
    spec = {"model_config": shallow, "engine_config": engine_config_fields(config),
            "num_pages": num_pages,
            "kernels": {"backend": kernels.backend, "off": [list(o) for o in kernels.off]}}
    key = hashlib.sha256(json.dumps([spec, [list(s) for s in shapes], mx.__version__],
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    marker = Path(folder) / f"tandem-warm-up-{key}.done"
    if marker.exists():
        return None
    text = model_config.get("text_config", model_config)
    share = (shallow.get("text_config", shallow)["num_hidden_layers"]
             / max(int(text["num_hidden_layers"]), 1))
    per_worker = share * (mx.get_active_memory() + pool_bytes) + WORKER_OVERHEAD
    total = mx.device_info().get("memory_size") or 0
    free = int(total) - mx.get_active_memory() - pool_bytes if total else 0
    fits = int(free // per_worker) if total else len(shapes)
    workers = worker_count(config.warm_up_workers, on_cuda, os.cpu_count() or 1,
                           len(shapes), fits)
    return Plan(spec, workers, Path(folder), marker) if workers else None


def quantization_of(model: nn.Module, config: dict) -> dict | None:
    """The config's "quantization" entry, else the first quantized layer's bits and
    group size (a GGUF's config has none), else None (not quantized)."""
    if isinstance(config.get("quantization"), dict):
        return config["quantization"]
    for _, m in model.named_modules():
        if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            return {"bits": m.bits, "group_size": m.group_size}
    return None


def engine_config_fields(config: EngineConfig) -> dict:
    """What the worker's EngineConfig is made from: the engine's, with no disk cache and
    no warm-up or workers of its own (it runs the shapes it is given)."""
    fields = dataclasses.asdict(config)
    fields.update(cache_dir=None, warm_up=False, warm_up_workers=0)
    return fields


def main() -> None:
    from engine.core.runner import Runner
    from engine.core.warm_up import run_shape_once
    from engine.loading.model_bundle import InMemoryModel, load_bundle
    from engine.loading.random_weights import random_model
    from kernels.kernel_set import KernelSet

    spec = json.load(sys.stdin)
    config = EngineConfig(**spec["engine_config"])
    model = random_model(spec["model_config"])     # of the engine's quantization
    kernels = KernelSet(spec["kernels"]["backend"],
                        tuple(tuple(off) for off in spec["kernels"]["off"]))
    bundle = load_bundle(InMemoryModel(model, None, spec["model_config"], "warm-up worker"),
                         config, kernels=kernels)
    runner = Runner(bundle.model, config, spec["num_pages"])
    mx.eval(runner.cache_arrays())
    for shape in spec["shapes"]:
        t0 = time.perf_counter()
        run_shape_once(runner, tuple(shape))
        print(json.dumps({"shape": shape, "seconds": round(time.perf_counter() - t0, 3)}),
              flush=True)


if __name__ == "__main__":
    main()
