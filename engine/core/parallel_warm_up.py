"""A cold kernel cache compiled in several processes at once, before the warm-up.

MLX's CUDA backend compiles each kernel (NVRTC) the first time a process meets it, one
at a time, and keeps it in MLX_PTX_CACHE_DIR (engine/kernel_cache.py). On the H200 a
first start of the full-size model took 350 s to "Ready", 259 s of it in the warm-up's
13 shapes, on one of 16 cores (docs/PERFORMANCE.md, "First start on CUDA"). The kernels
a forward needs follow from its layers' shapes, not from how many layers there are, so
worker processes (engine/core/warm_up_worker.py) each build a shallow copy of the model
(every kind of layer once: shallow_config) with random weights of its quantization, run
a share of the warm-up's shapes, and what they compiled is copied into the engine's
cache folder; the engine's own warm-up (engine/core/warm_up.py) then finds it there.

Each worker compiles into a folder of its own, never a file another process writes,
and only a worker that exited cleanly has its files copied (a killed one may have left
half a file); files the cache has already are kept. A worker that fails, or is still
running at the deadline, costs nothing but its share: the warm-up compiles what is
missing, as before. Plain Python (no mlx): the engine thread passes what it knows.
"""
from __future__ import annotations

import copy
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_WORKERS = 8
DEADLINE_S = 900.0      # past it, the workers still running are stopped


def worker_count(setting: int | None, on_cuda: bool, cpus: int, shapes: int,
                 fits: int) -> int:
    """Workers to start: the setting (EngineConfig.warm_up_workers), or on CUDA one per
    two cores up to MAX_WORKERS; never more than there are shapes, nor than fit in the
    device memory left (fits); fewer than 2 is none (one worker would only add its start
    to the engine's own warm-up)."""
    wanted = setting if setting is not None else (min(MAX_WORKERS, cpus // 2) if on_cuda else 0)
    n = min(wanted, shapes, fits)
    return n if n >= 2 else 0


def shallow_config(config: dict) -> dict:
    """config.json with as few layers as still hold every kind of layer the model has
    (attention and linear attention, dense and expert MLPs): the same kernels compile."""
    shallow = copy.deepcopy(config)
    text = shallow.get("text_config", shallow)
    total = int(text["num_hidden_layers"])
    if text.get("layer_types"):
        kinds = text["layer_types"]
        n = max(kinds.index(kind) for kind in set(kinds)) + 1
    else:
        n = int(text.get("full_attention_interval") or 1)
    n = max(n, int(text.get("decoder_sparse_step") or 1))
    dense = sorted(text.get("mlp_only_layers") or ())
    if dense:
        n = max(n, dense[0] + 1)
        text["mlp_only_layers"] = [i for i in dense if i < n]
    n = min(n, total)
    text["num_hidden_layers"] = n
    if text.get("layer_types"):
        text["layer_types"] = text["layer_types"][:n]
    return shallow


def split(shapes: list[tuple], workers: int) -> list[list[tuple]]:
    """Round-robin shares, in order: neighbouring shapes (chunk lengths 16, 32...; each
    its own kernel tiles) go to different workers."""
    return [shapes[i::workers] for i in range(workers)]


@dataclass
class Report:
    workers: int
    shapes: int
    done: int = 0                  # shapes the workers ran
    copied: int = 0                # files copied into the engine's cache
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)   # why a worker's share was lost

    def line(self) -> str:
        failed = f"; {len(self.failures)} failed: {self.failures[0]}" if self.failures else ""
        return (f"{self.workers} warm-up workers ran {self.done}/{self.shapes} shapes in "
                f"{self.seconds:.1f} s, {self.copied} kernels copied{failed}")


def compile_in_workers(spec: dict, shapes: list[tuple], workers: int, cache_dir: Path,
                       progress: Callable[[int, int], None] = lambda done, total: None,
                       deadline_s: float = DEADLINE_S) -> Report:
    """Run the shapes in `workers` processes (spec: what warm_up_worker.main reads, less
    the shapes) and copy what they compiled into cache_dir. progress(done, total) after
    each shape a worker finishes."""
    report = Report(workers, len(shapes))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tandem-warm-up-") as tmp:
        procs = [_start(dict(spec, shapes=[list(s) for s in share]), Path(tmp) / f"w{i}")
                 for i, share in enumerate(split(shapes, workers))]
        try:
            report.done = _follow(procs, len(shapes), progress, t0 + deadline_s)
        finally:
            for proc, _ in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for proc, folder in procs:
            if proc.returncode == 0:
                report.copied += copy_new_files(folder, cache_dir)
            else:
                err = folder.with_suffix(".err").read_text(errors="replace").strip().splitlines()
                report.failures.append(f"rc {proc.returncode}: {err[-1] if err else 'stopped'}")
    report.seconds = time.perf_counter() - t0
    return report


def _start(spec: dict, folder: Path) -> tuple[subprocess.Popen, Path]:
    folder.mkdir(parents=True)
    env = dict(os.environ, MLX_PTX_CACHE_DIR=str(folder), PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parents[2])     # where `engine` and `kernels` are
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # stderr to a file beside the folder (a pipe nobody reads can fill and stall it)
    with open(folder.with_suffix(".err"), "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "engine.core.warm_up_worker"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, env=env, cwd=root)
    proc.stdin.write(json.dumps(spec).encode())
    proc.stdin.close()
    return proc, folder


def _follow(procs, total: int, progress, deadline: float) -> int:
    """Read the workers' lines (one per shape done) until all exit or the deadline."""
    done = 0
    sel = selectors.DefaultSelector()
    for proc, _ in procs:
        sel.register(proc.stdout, selectors.EVENT_READ)
    while sel.get_map() and time.perf_counter() < deadline:
        for key, _ in sel.select(timeout=max(0.0, min(5.0, deadline - time.perf_counter()))):
            line = key.fileobj.readline()
            if not line:
                sel.unregister(key.fileobj)
                key.fileobj.close()
            elif line.startswith(b"{"):
                done += 1
                progress(done, total)
    for proc, _ in procs:
        left = deadline - time.perf_counter()
        try:
            if left > 0:
                proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            pass                        # stopped by the caller
    return done


def copy_new_files(folder: Path, cache_dir: Path) -> int:
    """Copy each file of folder that cache_dir lacks (under a temporary name, then
    renamed: MLX never reads half a file); returns how many."""
    copied = 0
    cache_dir.mkdir(parents=True, exist_ok=True)
    for src in sorted(p for p in folder.rglob("*") if p.is_file()):
        dst = cache_dir / src.relative_to(folder)
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        part = dst.with_name(f".{dst.name}.{os.getpid()}.part")
        shutil.copyfile(src, part)
        os.replace(part, dst)
        copied += 1
    return copied
