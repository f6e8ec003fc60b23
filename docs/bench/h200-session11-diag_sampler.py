"""GPU diagnostic: where the app's default sampling (temperature 0.7, top-p 0.95) spends
its time on a 248,320-id vocabulary. Session 10 saw it add ~10 ms to a B=8 decode step
on the H200 (greedy 12.0 -> 21.8 ms); on this project's 2-core CPU at [8, 49152] the
31-step bisection is 17.7 of the 25 ms. This times each part of
engine/core/sampler.py's top-p path alone (evaluated, medians of 5) at B = 1, 8, 32.
Run from the project root:  PYTHONPATH=. python3 docs/bench/h200-session11-diag_sampler.py
"""
import time

import mlx.core as mx
import numpy as np

from engine.core import sampler as S
from engine.sampling_params import SamplingParams


def timed(name, f, n=5):
    mx.eval(f())
    ts = []
    for _ in range(n):
        s = time.perf_counter()
        mx.eval(f())
        ts.append(time.perf_counter() - s)
    print(f"  {name:28s} {1e3 * float(np.median(ts)):8.3f} ms", flush=True)


def main():
    V = 248_320
    for B in (1, 8, 32):
        print(f"B={B} V={V} on {mx.default_device()}")
        logits = mx.array(np.random.default_rng(0).normal(size=(B, V)).astype(np.float32) * 3)
        d = logits / 0.7
        d = d - mx.max(d, axis=-1, keepdims=True)
        w = S._exp(d)
        key = (0.0 - d).view(mx.int32)
        target = S._row_sum(w) * 0.95
        hi = mx.full((B, 1), 2_000_000_000, mx.int32)
        mid = mx.full((B, 1), 1_000_000_000, mx.int32)
        keys = mx.random.split(mx.random.key(0), B)
        mx.eval(d, w, key, target, keys)
        p = SamplingParams(temperature=0.7, top_p=0.95)
        states = [S.RowSampler(p) for _ in range(B)]
        timed("sample_batch (whole)", lambda: S.sample_batch(logits, states))
        timed("temperature only", lambda: S.sample(logits, [SamplingParams(temperature=0.7)] * B, keys=keys))
        timed("greedy", lambda: S.sample(logits, [SamplingParams()] * B))
        timed("_kept_weights", lambda: S._kept_weights(logits, [p] * B))
        timed("_top_p_keep", lambda: S._top_p_keep(d, w, [0.95] * B))
        timed("_bisect_cut (31 steps)", lambda: S._bisect_cut(key, w, target, hi))
        timed("_mass_before (one step)", lambda: S._mass_before(key, w, mid))
        timed("_row_sum", lambda: S._row_sum(w))
        timed("cumsum [B, V]", lambda: mx.cumsum(w, axis=-1))
        timed("_draw", lambda: S._draw(w, keys))
        timed("max [B, V]", lambda: mx.max(d, axis=-1))
        timed("sort [B, V]", lambda: mx.sort(d, axis=-1))
        timed("topk 1024", lambda: mx.topk(d, 1024, axis=-1))
        timed("scatter-add f32 4096 bins", lambda: mx.zeros((B, 4096)).at[
            mx.arange(B)[:, None], key >> 19].add(w))


if __name__ == "__main__":
    main()
