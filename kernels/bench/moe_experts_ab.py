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
--order: this tree's moe_experts as it is, with launch 1 reading each routed expert once
for all its tokens (moe_experts.DEDUPE_FROM_PAIRS), with both grids row-tile-major
(moe_experts.TILE_MAJOR), and with both; the largest difference from the first. With
--staged: as it is, with launch 1 copying its rows into shared memory first
(moe_experts.STAGED), with launch 2 doing so (STAGED_DOWN), and with both.
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


def _after(setup, fn):
    """fn() after setup() (which sets the module state a candidate runs with)."""
    def run():
        setup()
        return fn()
    return run


def _max_diff(a: mx.array, b: mx.array) -> float:
    return mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()


def _ab(title: str, built: dict, backend: str, ours: tuple, base: tuple, fn) -> None:
    fns = {"base": _after(lambda: built.__setitem__(backend, base), fn),
           "this": _after(lambda: built.__setitem__(backend, ours), fn)}
    diff = _max_diff(fns["base"](), fns["this"]())
    report(f"{title} (max diff {diff:.3g})", compare(fns), "base")


def _sweep(sizes, settings: dict, backend: str, experts) -> None:
    """This tree's moe_experts at each size under each setting (name -> a function that
    sets moe_experts' constants), alternating, the first the baseline; with the routed
    pairs that repeat an expert and the largest difference from the baseline's output."""
    rng = np.random.default_rng(0)
    saved = me.RPW1, me.RPW2, me.DEDUPE_FROM_PAIRS, me.TILE_MAJOR, me.STAGED, me.STAGED_DOWN
    for N in sizes:
        x, idx, scores, res, gate, _ = _inputs(N, rng)

        def fn():
            return me.kernel(x, idx, scores, experts, gate, res, backend=backend)
        fns = {name: _after(setup, fn) for name, setup in settings.items()}
        outs = [f() for f in fns.values()]
        diff = max(_max_diff(outs[0], y) for y in outs)
        repeats = N * 8 - len(set(np.array(idx).ravel().tolist()))
        report(f"N={N} ({repeats} repeats, max diff {diff:.3g})", compare(fns),
               next(iter(settings)))
    me.RPW1, me.RPW2, me.DEDUPE_FROM_PAIRS, me.TILE_MAJOR, me.STAGED, me.STAGED_DOWN = saved


def _rows(g: int, d: int):
    def setup():
        me.RPW1, me.RPW2 = g, d
    return setup


def _order(dedupe_from, tile_major: bool):
    def setup():
        me.DEDUPE_FROM_PAIRS, me.TILE_MAJOR = dedupe_from, tile_major
    return setup


def _staged(gate_up: bool, down: bool):
    def setup():
        me.STAGED, me.STAGED_DOWN = gate_up, down
    return setup


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
    if backend == "cuda" and argv == ["--order"]:
        _sweep((2, 4, 8, 16, 32), {"plain": _order(None, False), "dedupe": _order(1, False),
                                   "tile": _order(None, True), "both": _order(1, True)},
               backend, _block()._block_experts())
        return
    if backend == "cuda" and argv == ["--staged"]:
        _sweep((1, 4, 8, 16, 32), {"plain": _staged(False, False), "gate_up": _staged(True, False),
                                   "down": _staged(False, True), "both": _staged(True, True)},
               backend, _block()._block_experts())
        return
    if backend == "cuda" and len(argv) == 2 and argv[0] == "--rows":
        rows = [tuple(int(r) for r in s.split("/")) for s in argv[1].split(",")]
        _sweep((1, 4, 8, 16, 32), {f"{g}/{d}": _rows(g, d) for g, d in rows}, backend,
               _block()._block_experts())
        return
    if backend != "cuda" or len(argv) != 1:
        print("needs a CUDA GPU and the base sources' path, --rows, --order or --staged "
              "(see the docstring)")
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
