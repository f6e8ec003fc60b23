"""``python -m kernels.bench.cuda_on_cpu_qmv_normed``: kernels/qmv_normed.py's CUDA body on the CPU,
and kernels/add_norm_qmv.py's (the same product after a residual add and its own norm).

The body is compiled by g++ as written (kernels/bench/cuda_shim.py's shim: a block's
threads are std::threads, blocks one after another) with float32 x, weights' scales and
biases (its bf16 instantiation differs only in the loads' and roundings' conversions),
and compared with a float64 numpy norm and product of the same values. So this checks
the norm's block reduction, the padded shared layout, each lane's columns and groups,
the rows a warp and block take (N not a multiple of a block's rows), 4 and 8 bits;
with the residual, also the h and hn block 0 writes. Not speed. ~5-20 s a case on two cores.
"""
from __future__ import annotations

import sys

import numpy as np

import kernels.add_norm_qmv as anq
import kernels.qmv_normed as qn
from kernels.bench.cuda_on_cpu_qmm import _dequantize
from kernels.bench.cuda_shim import PRE, build_and_run, kfunc, launch, run_cases

EPS = 1e-6


def emulate(N: int, K: int, GS: int, bits: int, residual: bool = False, *, seed: int,
            work: str) -> float:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(K) * 3).astype(np.float32)
    r = (rng.standard_normal(K) * 2).astype(np.float32)
    nw = (1 + 0.2 * rng.standard_normal(K)).astype(np.float32)
    w = rng.integers(0, 2**32, size=(N, K * bits // 32), dtype=np.uint64).astype(np.uint32)
    s = (rng.uniform(0.5, 1.5, (N, K // GS)) / 8 * K**-0.5 / (1 << (bits - 4))).astype(np.float32)
    b = (-((1 << bits) - 1) / 2 * s + rng.normal(0, 0.1, s.shape) * s).astype(np.float32)
    for name, arr in {"x": x, "r": r, "nw": nw, "w": w, "s": s, "b": b}.items():
        arr.tofile(f"{work}/{name}.bin")
    rows = qn.WARPS * qn.ROWS_PER_WARP
    if residual:
        body, args = anq._CUDA_SOURCE, (
            "const float* x, const float* r, const float* norm_weight, const float* eps,"
            " const uint32_t* w, const int* w_shape, const float* scales,"
            " const float* biases, float* y, float* h, float* hn")
        call = "qmv(X.data(), R.data(), NW.data(), EPSV, W.data(), WS, S.data(), B.data(), " \
               "Y.data(), H.data(), HN.data())"
    else:
        body, args = qn._CUDA_SOURCE, (
            "const float* x, const float* norm_weight, const float* eps, const uint32_t* w,"
            " const int* w_shape, const float* scales, const float* biases, float* y")
        call = "qmv(X.data(), NW.data(), EPSV, W.data(), WS, S.data(), B.data(), Y.data())"
    src = PRE + kfunc(
        "qmv", body, args,
        [("K", K), ("BITS", bits), ("GS", GS), ("WARPS", qn.WARPS),
         ("ROWS_PER_WARP", qn.ROWS_PER_WARP), ("PAD", qn.PAD), ("OT", "float")])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> X, R, NW, S, B, Y, H, HN; std::vector<uint32_t> W;
float EPSV[1] = {{{EPS}f}};
int WS[2] = {{{N}, {K * bits // 32}}};
''' + launch("q", call, -(-N // rows), threads=32 * qn.WARPS) + f'''
int main() {{
  X = load<float>("{work}/x.bin", {K}); R = load<float>("{work}/r.bin", {K});
  NW = load<float>("{work}/nw.bin", {K});
  W = load<uint32_t>("{work}/w.bin", {N * K * bits // 32});
  S = load<float>("{work}/s.bin", {N * K // GS}); B = load<float>("{work}/b.bin", {N * K // GS});
  Y.assign({N}, -1e30f); H.assign({K}, -1e30f); HN.assign({K}, -1e30f);
  run_q();
  FILE* f = fopen("{work}/y.bin", "wb"); fwrite(Y.data(), 4, Y.size(), f); fclose(f);
  f = fopen("{work}/h.bin", "wb"); fwrite(H.data(), 4, H.size(), f); fclose(f);
  f = fopen("{work}/hn.bin", "wb"); fwrite(HN.data(), 4, HN.size(), f); fclose(f);
}}
'''
    build_and_run(src, work)
    y = np.fromfile(f"{work}/y.bin", np.float32)
    x64 = x.astype(np.float64) + (r.astype(np.float64) if residual else 0.0)
    xn = x64 / np.sqrt(np.mean(x64 * x64) + EPS) * nw
    wf = _dequantize(w, s, b, bits).astype(np.float64)
    ref, mag = wf @ xn, np.abs(wf) @ np.abs(xn)
    err = float((np.abs(y - ref) / mag).max())
    if residual:    # h and hn, float32 here: within a float32 rounding or two of float64
        h, hn = (np.fromfile(f"{work}/{n}.bin", np.float32) for n in ("h", "hn"))
        err = max(err, float((np.abs(h - x64) / np.abs(x64).max()).max()),
                  float((np.abs(hn - xn) / np.abs(xn).max()).max()))
    print(f"N={N} K={K} GS={GS} bits={bits} residual={residual}: max |y - ref| / "
          f"sum|terms| (and h, hn) = {err:.2e}", flush=True)
    return err


# N past a block's 32 rows and not a multiple of them; K over one and several turns
CASES = [(40, 1024, 64, 4), (64, 2048, 32, 4), (33, 2048, 128, 4), (40, 512, 64, 8),
         (70, 2048, 64, 8)]
# The router's shape (257 rows of 2,048 at 8 bits: 9 blocks, the last partial), 4 bits
RESIDUAL_CASES = [(257, 2048, 64, 8, True), (40, 1024, 64, 4, True)]


def main(argv: list[str]) -> int:
    return run_cases(emulate, CASES + RESIDUAL_CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
