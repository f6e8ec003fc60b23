"""``python -m kernels.bench.cuda_on_cpu_cdf_draw``: kernels/cdf_draw.py's CUDA source on the CPU.

Not a benchmark: a check of the source's levels, piece bounds and walk where no GPU is at
hand, with kernels/bench/cuda_shim.py's shim (a block's threads as std::threads, 256
here; the GPU launches 1,024: 8 pieces a level instead of 32). Each draw is checked
against its definition in float64 (the drawn id has weight and its slice of the exact
running sum holds u x total, within the kernel's bound) and against the sampler's plain
draw (kernels.cdf_draw.reference), which it must equal wherever t is farther than that
bound from a slice's edge.
"""
import sys
import tempfile

import mlx.core as mx
import numpy as np

import kernels.cdf_draw as cd
from kernels.bench.cuda_on_cpu_top_p import VECTORS
from kernels.bench.cuda_shim import PRE, build_and_run, kfunc, launch

THREADS = 256
MIN = "#include <algorithm>\nusing std::min;\n"


def emulate(kept: np.ndarray, u: np.ndarray, work: str) -> np.ndarray:
    rows, V = kept.shape
    kept.astype(np.float32).tofile(f"{work}/w.bin")
    u.astype(np.float32).tofile(f"{work}/u.bin")
    src = PRE + VECTORS + MIN + kfunc("draw", cd._CUDA_SOURCE,
                                      "const float* kept, const int* kept_shape,"
                                      " const float* u, int* out", [])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> W, U; std::vector<int> O; int KS[2] = {{{rows}, {V}}};
''' + launch("draw", "draw(W.data(), KS, U.data(), O.data())", rows, THREADS) + f'''
int main() {{
  W = load<float>("{work}/w.bin", {rows * V}); U = load<float>("{work}/u.bin", {rows});
  O.assign({rows}, -1);
  run_draw();
  FILE* f = fopen("{work}/o.bin", "wb"); fwrite(O.data(), 4, O.size(), f); fclose(f);
}}
'''
    build_and_run(src, work)
    return np.fromfile(f"{work}/o.bin", np.int32)


def miss(kept: np.ndarray, u: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per row, how far t = u x total lies outside the drawn id's exact slice, as a share
    of the total (<= 0: inside); +inf for an id without weight."""
    w = kept.astype(np.float64)
    running = np.cumsum(w, axis=-1)
    total = running[:, -1]
    t = u.ravel().astype(np.float64) * total
    r = np.arange(len(ids))
    start = np.where(ids > 0, running[r, np.maximum(ids - 1, 0)], 0.0)
    out = np.maximum(start - t, t - running[r, ids]) / total
    return np.where(w[r, ids] > 0, out, np.inf)


def cases(rng):
    """(kept, u) rows: the app's kept weights (top-p 0.95 of x3 logits at t = 0.7) at the
    real vocabularies, flat rows, dropped runs at the ends, u at 0 and just below 1."""
    for V, scale in [(248_320, 3 / 0.7), (49_152, 3 / 0.7), (5003, 1.0), (300, 0.2),
                     (64, 2.0), (4099, 8.0)]:
        rows = 6
        logits = rng.standard_normal((rows, V)).astype(np.float32) * scale
        d = logits - logits.max(-1, keepdims=True)
        w = np.exp2(d * 1.4426950408889634).astype(np.float32)
        order = np.argsort(-w, axis=-1, kind="stable")
        mass = np.cumsum(np.take_along_axis(w.astype(np.float64), order, -1), -1)
        drop = mass - np.take_along_axis(w, order, -1) >= 0.95 * mass[:, -1:]
        np.put_along_axis(w, order, np.where(drop, 0, np.take_along_axis(w, order, -1)), -1)
        w[1, : V // 2] = 0                                  # dropped ids before the kept
        w[2, V // 3:] = 0                                   # and after
        w[2, 0] = max(w[2, 0], 1.0)
        u = rng.random(rows).astype(np.float32)
        u[3], u[4] = 0.0, np.float32(1 - 2 ** -24)
        yield w, u


def main() -> int:
    rng = np.random.default_rng(0)
    worst, differ = -1.0, 0
    with tempfile.TemporaryDirectory() as work:
        for kept, u in cases(rng):
            ids = emulate(kept, u, work)
            V = kept.shape[1]
            tol = cd.depth(V) * 2.0 ** -24
            m = miss(kept, u, ids)
            ref = np.array(cd.reference(mx.array(kept), mx.array(u[:, None])))
            clear = miss(kept, u, ref) < -tol                # t well inside ref's slice
            differ += int(np.sum((ids != ref) & clear))
            worst = max(worst, float(m.max() / tol))
            print(f"V={V}: ids {ids.tolist()}, miss/bound {m.max() / tol:.2e}, "
                  f"plain draw's ids {'equal' if np.array_equal(ids, ref) else ref.tolist()}",
                  flush=True)
    ok = worst <= 1.0 and differ == 0
    print(f"worst miss {worst:.2e} of the bound, {differ} clear draws unlike the plain "
          f"draw: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
