"""This tree's moe_experts and moe_block kernels against another revision's sources, in
one process, alternating (kernels/bench/common.py), on the real shapes.

The base is a copy of that revision's kernels/moe_experts_src.py (its templates, filled
with its own hooks for moe_experts and with this tree's moe_block hooks); its kernels are
built under names ending "_base". Each size prints both times and the largest difference
between the two outputs (a change meant to keep every float prints 0).
Run: git show REV:kernels/moe_experts_src.py > /tmp/moe_experts_src_base.py
     PYTHONPATH=. python -m kernels.bench.moe_experts_ab /tmp/moe_experts_src_base.py
With --rows G/D,G/D,...: this tree's moe_experts at each rows-a-warp setting instead
(moe_experts.RPW1/RPW2: gate/up outputs, down rows), the first the baseline. With
--dedupe: this tree's moe_experts with launch 1 reading each routed expert once for all
its tokens (moe_experts.DEDUPE_FROM_PAIRS) against without, and their largest difference.
"""
from __future__ import annotations

import importlib.util
import sys

import mlx.core as mx
import numpy as np

import kernels.moe_block as mb
import kernels.moe_block_src as mbs
import kernels.moe_experts as me
from kernels.backend import gpu_backend
from kernels.bench.common import compare, report
from kernels.bench.moe_experts import D, E, _block


def _base_module(path: str):
    spec = importlib.util.spec_from_file_location("moe_experts_src_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with(built: dict, backend: str, kernels: tuple, fn):
    """fn() with `kernels` as the module's built pair on `backend`."""
    def run():
        built[backend] = kernels
        return fn()
    return run


def _ab(title: str, built: dict, backend: str, ours: tuple, base: tuple, fn) -> None:
    fns = {"base": _with(built, backend, base, fn), "this": _with(built, backend, ours, fn)}
    a, b = fns["base"](), fns["this"]()
    diff = mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()
    report(f"{title} (max diff {diff:.3g})", compare(fns), "base")


def _rows_sweep(settings: list[tuple[int, int]], backend: str, experts) -> None:
    rng = np.random.default_rng(0)
    saved = me.RPW1, me.RPW2

    def at(rows, fn):
        def run():
            me.RPW1, me.RPW2 = rows
            return fn()
        return run
    for N in (1, 4, 8, 16, 32):
        x, idx, scores, res, gate, _ = _inputs(N, rng)

        def fn():
            return me.kernel(x, idx, scores, experts, gate, res, backend=backend)
        report(f"moe_experts N={N}", compare({f"{g}/{d}": at((g, d), fn) for g, d in settings}),
               f"{settings[0][0]}/{settings[0][1]}")
    me.RPW1, me.RPW2 = saved


def _dedupe_ab(backend: str, experts) -> None:
    rng = np.random.default_rng(0)
    saved = me.DEDUPE_FROM_PAIRS

    def at(setting, fn):
        def run():
            me.DEDUPE_FROM_PAIRS = setting
            return fn()
        return run
    for N in (2, 4, 8, 16, 32):
        x, idx, scores, res, gate, _ = _inputs(N, rng)

        def fn():
            return me.kernel(x, idx, scores, experts, gate, res, backend=backend)
        fns = {"off": at(None, fn), "dedupe": at(1, fn)}
        a, b = fns["off"](), fns["dedupe"]()
        diff = mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()
        shared = N * 8 - len(set(np.array(idx).ravel().tolist()))
        report(f"N={N} ({shared} repeats, max diff {diff:.3g})", compare(fns), "off")
    me.DEDUPE_FROM_PAIRS = saved


def _inputs(N: int, rng):
    x = mx.random.normal((N, D), key=mx.random.key(N)).astype(mx.bfloat16)
    idx = mx.array(np.stack([rng.choice(E, 8, replace=False) for _ in range(N)]), mx.int32)
    scores = mx.softmax(mx.random.normal((N, 8)), axis=-1)
    res = mx.random.normal((N, D)).astype(mx.bfloat16)
    gate = mx.random.normal((N, 1)).astype(mx.bfloat16)
    logits = mx.random.normal((N, E)).astype(mx.bfloat16)
    mx.eval(x, idx, scores, res, gate, logits)
    return x, idx, scores, res, gate, logits


def main(argv: list[str]) -> None:
    backend = gpu_backend()
    print(f"moe_experts_ab  backend={backend}  device={mx.default_device()}", flush=True)
    if backend == "cuda" and argv == ["--dedupe"]:
        _dedupe_ab(backend, _block()._block_experts())
        return
    if backend == "cuda" and len(argv) == 2 and argv[0] == "--rows":
        settings = [tuple(int(r) for r in s.split("/")) for s in argv[1].split(",")]
        _rows_sweep(settings, backend, _block()._block_experts())
        return
    if backend != "cuda" or len(argv) != 1:
        print("needs a CUDA GPU and the base sources' path, or --rows (see the docstring)")
        return
    base_src = _base_module(argv[0])
    experts = _block()._block_experts()
    pair = (me.build(backend, me._SOURCES[backend]),
            me.build(backend, base_src.sources(backend, base_src.IDX_HOOKS), "_base"))
    block = (mb.build(backend, mbs.SOURCES[backend]),
             mb.build(backend, mbs.block_sources(backend, base_src.sources), "_base"))
    rng = np.random.default_rng(0)
    for N in (1, 2, 4, 8, 16, 32):
        x, idx, scores, res, gate, logits = _inputs(N, rng)
        _ab(f"moe_experts N={N}", me._built, backend, *pair,
            lambda: me.kernel(x, idx, scores, experts, gate, res, backend=backend))
        if N <= mb.MAX_ROWS:
            _ab(f"moe_block N={N}", mb._built, backend, *block,
                lambda: mb.kernel(x, logits, 8, True, experts, gate, res, backend=backend))
    me._built.pop(backend, None)
    mb._built.pop(backend, None)


if __name__ == "__main__":
    main(sys.argv[1:])
