"""MLX's own CUDA kernels for this model, compiled in worker processes at once (issue 23, item 5).

Why: on an empty kernel cache, a first start on CUDA waited minutes in its warm-up (210 s
for the built-in model's shape on an H200, docs/PERFORMANCE.md "First start on CUDA"):
MLX compiles each of its kernel modules with NVRTC the first time the process meets it,
one at a time, and the quantized matmul's tiles (qmm_sm80_*, CUTLASS templates) are the
slow ones. Splitting the warm-up's shapes over processes did not help (session 17: every
shape needs nearly every module). Here each worker meets *different* modules: one op per
module, chosen from the model itself (its quantized layers' dtype, bits, group size and
mode) and the row counts the engine will run (MLX picks a module per row tile), and the
embedding's gathers, the cache pools' scatters; and one worker runs the app's sampling graph (its fused kernels:
~27 s of the full-size model's cold start on the H100 went to the warm-up's sampler
step, session 36). Each
worker is a plain MLX process (mlx_prewarm_worker.py) whose MLX writes into a folder of
its own; each module then moves into MLX_PTX_CACHE_DIR with a rename per file (MLX
writes in place: a file seen half written would fail to load in every later start). The
engine waits for them before it measures the experts' paths and warms up, and then
loads those modules instead of compiling them.

Only a speed-up: a module no worker made (another MLX picks other modules, a worker
failed or timed out) is compiled by MLX in the engine as before. Checked once per
machine: a marker in the cache folder names the ops done for this MLX and GPU, so a
warm start starts no worker. `TANDEM_MLX_PREWARM=0` turns it off. CUDA only.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from kernels.kernel_seeding import dtype_name, mlx_cache_dir

log = logging.getLogger(__name__)
ENV_VAR = "TANDEM_MLX_PREWARM"
MAX_WORKERS = 6
MARKER = "tandem-mlx-prewarm.json"
_MAX_OUTPUTS = 4096
WORK_DIR = ".tandem-prewarm"     # the workers' own folders, inside the cache
_WORKER = Path(__file__).with_name("mlx_prewarm_worker.py")
_SOURCE_ROOT = Path(__file__).resolve().parents[2]   # the sampler worker imports engine, kernels


@dataclass(frozen=True)
class QuantizedShape:
    dtype: str          # the activations' (= the scales') dtype
    bits: int
    group_size: int
    mode: str
    k: int              # input features
    n: int              # output features


def quantized_shapes(model) -> list[QuantizedShape]:
    """Every distinct quantized matmul shape of the model's layers (plain, joined, experts'
    weights [E, N, K] as [N, K]), in the order first met."""
    seen: dict[QuantizedShape, None] = {}
    for _, m in model.named_modules():
        bits, group = getattr(m, "bits", None), getattr(m, "group_size", None)
        w, scales = getattr(m, "weight", None), getattr(m, "scales", None)
        if not (isinstance(bits, int) and isinstance(group, int) and isinstance(w, mx.array)
                and isinstance(scales, mx.array) and w.dtype == mx.uint32 and w.ndim >= 2):
            continue
        shape = QuantizedShape(dtype_name(scales.dtype), bits, group,
                               str(getattr(m, "mode", "affine")), w.shape[-1] * 32 // bits,
                               w.shape[-2])
        seen.setdefault(shape, None)
    return list(seen)


def embedding_gathers(model) -> list[str]:
    """The dtypes the model's embedding lookups gather (a quantized table: its packed
    uint32 words, then its scales' dtype), by int32 token ids: MLX compiles one gather
    module per (dtype, index dtype), every rank in it (indexing.cpp)."""
    seen: dict[str, None] = {}
    for _, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.QuantizedEmbedding)):
            for name in ("weight", "scales"):
                a = getattr(m, name, None)
                if isinstance(a, mx.array):
                    seen.setdefault(dtype_name(a.dtype), None)
    return list(seen)


def pool_dtypes(model) -> list[str]:
    """The dtypes of the cache pools a prompt's chunk writes by index (`pool[slots] = rows`,
    a Scatter): K/V pages and recurrent states. MLX compiles a scatter module per (dtype,
    index dtype); the bfloat16 one took 3 s of the warm-up on the H100 (session 36), and a
    float32 one compiled after "Ready" there (whose, Tandem's or mlx-lm's, is not known)."""
    spec_of = getattr(model, "cache_spec", None)
    if spec_of is None:
        return []
    spec = spec_of()
    seen = {dtype_name(spec.kv_dtype): None} if spec.num_kv_layers else {}
    for layer in spec.state_layers:
        for state in layer:
            seen.setdefault(dtype_name(state.dtype), None)
    return list(seen)


def sampler_op(model) -> dict | None:
    """The sampler worker's op: the vocabulary (the embedding table's rows) and the
    activations' dtype (a quantized table's scales'), as the warm-up's logits have them."""
    for _, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.QuantizedEmbedding)):
            scales = getattr(m, "scales", None)
            dtype = (scales if isinstance(scales, mx.array) else m.weight).dtype
            return {"op": "sampler", "dtype": dtype_name(dtype), "vocab": m.weight.shape[0]}
    return None


def row_tiles(max_rows: int) -> list[int]:
    """One row count per quantized-matmul module MLX 0.32 compiles on CUDA for up to max_rows
    rows: fewer than 8 rows take its precompiled matrix-vector kernel; from 8 the tile is
    the next power of two clamped to 16..64 (quantized.cpp, qmm_sm80.cu make_cta_tiler)."""
    return [t for t, least in ((16, 8), (32, 17), (64, 33)) if max_rows >= least]


def _key(op: dict) -> tuple:
    """The module an op makes MLX compile: everything but the matmul's sizes, except
    whether they suit MLX 0.32's tiled kernel (outputs a multiple of 128, inputs of the
    tile's 64 or the group: supports_qmm_sm80); otherwise MLX compiles its plain tiled
    kernel (qmm_naive), another module (~15 s against ~28 s on the H100's host)."""
    key = tuple((k, op[k]) for k in sorted(op) if k not in ("k", "n"))
    if op["op"] == "qmm":
        key += (("aligned", op["n"] % 128 == 0 and op["k"] % max(64, op["group_size"]) == 0),)
    return key


def prewarm_ops(shapes: list[QuantizedShape], max_rows: int,
                gathers: list[str] = (), scatters: list[str] = ()) -> list[dict]:
    """One op per quantized shape and row tile: the first of each (dtype, bits, group, mode,
    tile) compiles its module; the same key at the model's other shapes loads it from the
    cache (unless that shape takes another of MLX's paths, which then compiles there).
    Then one gather per embedding dtype, one scatter per cache pool dtype."""
    return ([{"op": "qmm", "dtype": s.dtype, "bits": s.bits, "group_size": s.group_size,
              "mode": s.mode, "rows": tile, "k": s.k, "n": _fewer_outputs(s.n)}
             for tile in row_tiles(max_rows) for s in shapes]
            + [{"op": "gather", "dtype": d, "index": "int32"} for d in gathers]
            + [{"op": "scatter", "dtype": d, "index": "int32"} for d in scatters])


def _fewer_outputs(n: int) -> int:
    """A head's 248,320 outputs as 4,096 plus the same remainder: the module MLX picks does
    not depend on how many outputs there are beyond their alignment, and a worker then holds
    ~8 MB of zeros instead of ~320 MB beside the engine's weights on the GPU."""
    return n if n <= 2 * _MAX_OUTPUTS else _MAX_OUTPUTS + n % _MAX_OUTPUTS


def split_among(ops: list[dict], workers: int) -> list[list[dict]]:
    """Each key's ops to one worker, in order (so a module is compiled once), the keys
    dealt round-robin: the distinct modules compile in different processes at once."""
    by_key: dict[tuple, list[dict]] = {}
    for op in ops:
        by_key.setdefault(_key(op), []).append(op)
    shares: list[list[dict]] = [[] for _ in range(workers)]
    for i, group in enumerate(by_key.values()):
        shares[i % workers].extend(group)
    return [s for s in shares if s]


def identity() -> str:
    info = mx.device_info()
    return (f"mlx {mx.__version__} | {info.get('device_name', '?')} | "
            f"sm {info.get('compute_capability_major', '?')}{info.get('compute_capability_minor', '?')}")


class Prewarm:
    """One per load: start() on the engine thread once the model's layers are final,
    wait() before the first forward that meets MLX's quantized matmuls."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.ops: list[dict] = []
        self.started = 0.0
        self.cache = Path()
        self.before: set[str] = set()
        self.own: list[Path] = []
        self.note = ""

    def start(self, model, max_rows: int, backend: str | None) -> None:
        if backend != "cuda" or os.environ.get(ENV_VAR, "1") == "0" or getattr(sys, "frozen", False):
            return
        self.cache = mlx_cache_dir()
        done = _marker_ops(self.cache, identity())
        ops = [o for o in prewarm_ops(quantized_shapes(model), max_rows,
                                      embedding_gathers(model), pool_dtypes(model))
               if _op_id(o) not in done]
        sampling = [o for o in [sampler_op(model)] if o is not None and _op_id(o) not in done]
        if not ops and not sampling:
            return
        keys = len({_key(o) for o in ops})
        workers = min(keys, MAX_WORKERS, max(1, ((os.cpu_count() or 2) - 1) // 2))
        self.ops, self.started, self.before = ops + sampling, time.perf_counter(), _modules(self.cache)
        # The sampler's graph is one long compile (~27 s): a worker of its own, so it runs
        # beside the matmuls' modules, within the kernels' self-test (~40 s cold).
        shares = (split_among(ops, workers) if ops else []) + ([sampling] if sampling else [])
        for i, share in enumerate(shares):
            # Each worker's MLX writes in a folder of its own inside the cache (one file
            # system: its modules then move in with a rename each; mlx_prewarm_worker.py).
            own = self.cache / WORK_DIR / f"{os.getpid()}-{i}"
            try:
                own.mkdir(parents=True, exist_ok=True)
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-I", str(_WORKER), json.dumps(share), str(self.cache),
                     str(_SOURCE_ROOT)],
                    env={**os.environ, "MLX_PTX_CACHE_DIR": str(own)},
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                self.own.append(own)
            except OSError as e:
                log.info("MLX prewarm: could not start a worker (%s)", e)

    def wait(self, timeout: float = 300.0) -> str:
        """Wait for the workers (then stop any still running: the engine compiles what they
        did not publish; a stopped worker's half-written files stay in its own folder,
        removed here); the summary line for the bench, '' when none ran."""
        if not self.procs:
            return self.note
        t_wait = time.perf_counter()
        made: list[dict] = []       # the ops a worker reported done ("ok ... JSON")
        failed = 0
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=max(0.0, timeout - (time.perf_counter() - t_wait)))
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            lines = out.splitlines()
            made += [json.loads(line.split(" ", 3)[3]) for line in lines if line.startswith("ok ")]
            failed += sum(line.startswith("failed ") for line in lines)
            for line in lines:
                if line.startswith("failed "):
                    log.info("MLX prewarm: %s", line[:300])
        done = time.perf_counter()
        for own in self.own:        # what a stopped worker left half written goes too
            shutil.rmtree(own, ignore_errors=True)
        new = len(_modules(self.cache) - self.before)
        if made:        # only what was done: a failed op is tried again at the next start
            _write_marker(self.cache, identity(), made)
        self.note = (f"MLX's kernels compiled ahead: {len(made)} of {len(self.ops)} ops in "
                     f"{len(self.procs)} processes ({failed} failed), {new} modules new, "
                     f"{done - self.started:.1f} s from the start, waited {done - t_wait:.1f} s")
        self.procs, self.own = [], []
        return self.note


def _modules(cache: Path) -> set[str]:
    try:
        return {str(p.relative_to(cache)) for p in cache.rglob("*.ptx")
                if WORK_DIR not in p.parts}
    except OSError:
        return set()


def _op_id(op: dict) -> str:
    return json.dumps(op, sort_keys=True)


def _marker_ops(cache: Path, ident: str) -> set[str]:
    """The ops the marker says were done for this MLX and GPU (none: no marker, or another's)."""
    try:
        done = json.loads((cache / MARKER).read_text())
    except (OSError, ValueError):
        return set()
    return {_op_id(o) for o in done.get("ops", [])} if done.get("identity") == ident else set()


def _write_marker(cache: Path, ident: str, ops: list[dict]) -> None:
    try:
        old = json.loads((cache / MARKER).read_text())
        kept = old.get("ops", []) if old.get("identity") == ident else []
    except (OSError, ValueError):
        kept = []
    have = {_op_id(o) for o in kept}
    merged = kept + [o for o in ops if _op_id(o) not in have]
    try:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / MARKER).write_text(json.dumps({"identity": ident, "ops": merged}))
    except OSError as e:
        log.info("MLX prewarm: could not write its marker (%s)", e)
