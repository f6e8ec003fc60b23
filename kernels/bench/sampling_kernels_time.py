"""``python -m kernels.bench.sampling_kernels_time --baseline REF``: the sampler's kernels, timed.

    PYTHONPATH=. python -m kernels.bench.sampling_kernels_time --baseline main [--shapes 248320x1,...]

Two tables. kernels/cdf_draw.py against the sampler's plain draw (its `reference`: a
running sum and a count over it, compiled as the sampler runs it), ids compared. And the
cut of app-like rows (random normal x3 logits at temperature 0.7, top-p 0.95) by
this tree's kernel and by the one committed at git REF (or the file at that path: a
machine without the history), alternating call by call in one process; each call
evaluated alone, so a time is its launches' dispatch plus the wait (the CUDA top_p_cut's
10 launches pay 10 dispatches here, one graph inside the compiled sampler: time that with
`engine.bench.sampler_cost --kernels`, the GPU's own time a kernel). Prints medians in ms and
whether the two cuts agree (they sum in different orders: a cut may differ where two
keys' masses are within float32 rounding of the target). Timings live here, never in
the tests. Needs a GPU (a kernel backend).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import mlx.core as mx

import kernels.cdf_draw as cd
import kernels.top_p_cut as current
from kernels.backend import gpu_backend


def load_baseline(ref: str):
    """kernels/top_p_cut.py as at `ref` (a file path or a git ref), its MLX kernel renamed
    so the two builds never share a name."""
    text = Path(ref).read_text() if Path(ref).is_file() else subprocess.run(
        ["git", "show", f"{ref}:kernels/top_p_cut.py"], check=True, capture_output=True,
        text=True).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_top_p_cut.py"
    path.write_text(text.replace('"tandem_top_p_cut"', '"tandem_top_p_cut_baseline"'))
    spec = importlib.util.spec_from_file_location("baseline_top_p_cut", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def app_rows(rows: int, vocab: int, seed: int = 0):
    """(key, weights, target) as the sampler builds them for temperature 0.7, top-p 0.95."""
    logits = mx.random.normal((rows, vocab), key=mx.random.key(seed)) * 3.0
    d = (logits - logits.max(axis=-1, keepdims=True)) / 0.7
    w = mx.power(2.0, d * 1.4426950408889634)
    key = (0.0 - d).view(mx.int32)
    target = 0.95 * w.sum(axis=-1, keepdims=True)
    mx.eval(key, w, target)
    return key, w, target


def timed(module, args, backend: str) -> tuple[float, mx.array]:
    t0 = time.perf_counter()
    cut = module.kernel(*args, backend=backend)
    mx.eval(cut)
    return (time.perf_counter() - t0) * 1e3, cut


def median_ms(fn, calls: int) -> float:
    fn()                                                           # compile, warm
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        mx.eval(fn())
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def draw_table(shapes: list[tuple[int, int]], calls: int, backend: str) -> None:
    """cdf_draw against the plain draw on the app's kept weights (top-p applied by the cut
    of this tree's kernel), a spread of uniforms."""
    print("| V x B | cdf_draw ms | plain draw ms | ratio | same ids |\n|---|---|---|---|---|")
    plain = mx.compile(cd.reference)
    for vocab, rows in shapes:
        key, w, target = app_rows(rows, vocab)
        kept = mx.where(key <= current.kernel(key, w, target, backend=backend)[:, :1], w, 0.0)
        u = ((mx.arange(rows) + 0.5) / rows)[:, None].astype(mx.float32)
        mx.eval(kept, u)
        ours = median_ms(lambda: cd.kernel(kept, u, backend=backend), calls)
        theirs = median_ms(lambda: plain(kept, u), calls)
        same = mx.array_equal(cd.kernel(kept, u, backend=backend), plain(kept, u)).item()
        print(f"| {vocab} x {rows} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x | "
              f"{same} |", flush=True)


def cut_table(shapes: list[tuple[int, int]], calls: int, backend: str, base) -> None:
    """This tree's top_p_cut against `base`'s, alternating call by call."""
    print("| V x B | this tree ms | baseline ms | ratio | cuts equal |\n|---|---|---|---|---|")
    for vocab, rows in shapes:
        inputs = app_rows(rows, vocab)
        for m in (current, base):                                  # compile, warm
            timed(m, inputs, backend)
        times = {current: [], base: []}
        for _ in range(calls):
            for m in (current, base):
                times[m].append(timed(m, inputs, backend)[0])
        ours, theirs = (statistics.median(times[m]) for m in (current, base))
        same = mx.array_equal(timed(current, inputs, backend)[1][:, :1],      # the cuts
                              timed(base, inputs, backend)[1][:, :1]).item()
        print(f"| {vocab} x {rows} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x | "
              f"{same} |", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", required=True, help="a git ref or a top_p_cut.py file")
    p.add_argument("--shapes", default="248320x1,248320x8,248320x32",
                   help="VOCABxROWS, comma-separated")
    p.add_argument("--calls", type=int, default=50)
    args = p.parse_args(argv)
    backend = gpu_backend()
    if backend is None:
        print("no kernel backend here (a GPU is needed)")
        return 1
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    draw_table(shapes, args.calls, backend)
    cut_table(shapes, args.calls, backend, load_baseline(args.baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
