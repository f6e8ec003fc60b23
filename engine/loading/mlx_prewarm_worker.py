"""One worker of engine/loading/mlx_prewarm.py: runs each op it is given once, so that
MLX compiles that op's CUDA kernel module into MLX_PTX_CACHE_DIR (the parent's).

Run as a script (``python mlx_prewarm_worker.py JSON SHARED [ROOT]``), never imported by
the engine: it imports only mlx (the sampler op also Tandem's sampler and kernel set,
from ROOT, the source tree's root), and its CUDA context is its own. MLX_PTX_CACHE_DIR is a
folder of this worker's own; after each op its new files move into SHARED (the engine's
cache), each with one rename, the names file before the code: MLX writes its files in
place, so a process reading SHARED must never see one half written (a worker stopped
mid-write, or read while it writes, would leave a module that fails to load in every
later start). JSON is a list of ops:
  {"op": "qmm", "dtype": "bfloat16", "bits": 4, "group_size": 64, "mode": "affine",
   "rows": 64, "k": 2048, "n": 512}, {"op": "gather", "dtype": "uint32", "index": "int32"},
  {"op": "scatter", "dtype": "float32", "index": "int32"},
  {"op": "sampler", "dtype": "bfloat16", "vocab": 248320}: the app's sampling of one row
  and of two, compiled as the engine's warm-up runs it (warm_sampler; ~27 s of NVRTC on a
  cold cache for the full-size model on the H100, session 36), with the kernel set's
  CUDA kernels.
Prints one line an op: its seconds, or the error (the parent only counts them: a failed
op costs nothing but the parent compiling that module itself, as without a worker).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def run_op(op: dict, root: str | None = None):
    import mlx.core as mx
    dtype = getattr(mx, op["dtype"])
    if op["op"] == "sampler":
        return _sampler(op, dtype, root)
    if op["op"] == "scatter":       # a pool's rows written at slots: pool[slots] = rows
        pool = mx.zeros((64, 2, 16), dtype=dtype)
        pool[mx.array([1, 2], dtype=getattr(mx, op["index"]))] = mx.ones((2, 2, 16), dtype=dtype)
        return pool
    if op["op"] == "gather":        # an embedding's lookup: table[ids], ids [B, T]
        ids = mx.array([[1, 2]], dtype=getattr(mx, op["index"]))
        return mx.take(mx.zeros((64, 32), dtype=dtype), ids, axis=0)
    if op["op"] != "qmm":
        raise ValueError(f"unknown op {op['op']!r}")
    bits, group, mode = op["bits"], op["group_size"], op.get("mode", "affine")
    packed = mx.zeros((op["n"], op["k"] * bits // 32), dtype=mx.uint32)
    scales = mx.ones((op["n"], op["k"] // group), dtype=dtype)
    biases = mx.zeros_like(scales) if mode == "affine" else None
    x = mx.zeros((op["rows"], op["k"]), dtype=dtype)
    return mx.quantized_matmul(x, packed, scales, biases, transpose=True,
                               group_size=group, bits=bits, mode=mode)


def _sampler(op: dict, dtype, root: str | None):
    """The warm-up's sampling graph (engine/core/sampler.py app_sampling_draws) on logits
    of the model's vocabulary, through a CUDA kernel set as the engine's is."""
    import mlx.core as mx
    if root and root not in sys.path:
        sys.path.insert(0, root)       # -I: neither the working folder nor PYTHONPATH
    from engine.core.sampler import app_sampling_draws
    from kernels.kernel_set import KernelSet
    # A CPU (the tests) launches no kernel and compiles nothing, as the engine there
    kernels = KernelSet("cuda") if mx.default_device().type == mx.DeviceType.gpu else None
    return app_sampling_draws(mx.zeros((1, op["vocab"]), dtype=dtype), kernels)


_ORDER = {".txt": 0, ".cu": 1, ".ptx": 2}   # MLX reads .ptx first: it must come last


def publish(own: Path, shared: Path) -> int:
    """Move the modules written under `own` into `shared` (same relative paths; long
    module names are folders there too), never replacing a file already there. Returns
    the number of modules (.ptx files) moved."""
    moved = 0
    for src in sorted((p for p in own.rglob("*") if p.is_file()),
                      key=lambda p: (str(p.with_suffix("")), _ORDER.get(p.suffix, 1))):
        dst = shared / src.relative_to(own)
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)                     # atomic: same file system (own is inside)
        moved += src.suffix == ".ptx"
    return moved


def main(argv: list[str]) -> int:
    import mlx.core as mx
    own, shared = Path(os.environ["MLX_PTX_CACHE_DIR"]), Path(argv[2])
    root = argv[3] if len(argv) > 3 else None
    failed = 0
    for op in json.loads(argv[1]):
        t0 = time.perf_counter()
        try:
            mx.eval(run_op(op, root))
            moved = publish(own, shared)
            print(f"ok {time.perf_counter() - t0:.2f} {moved} {json.dumps(op)}", flush=True)
        except Exception as e:   # noqa: BLE001 -- any failure: the parent compiles it itself
            failed += 1
            print(f"failed {type(e).__name__}: {e} {json.dumps(op)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
