"""``python -m kernels.bench.cuda_on_cpu_grouped [--real]``: kernels/moe_grouped.py's CUDA
source run on the CPU (the shim of kernels/bench/cuda_on_cpu.py: a block's threads as
std::threads, warp shuffles as barriers, and the tf32 MMA computed by the PTX ISA's
fragment tables from the registers every lane deposits), against a float64 numpy
reference that unpacks the nibbles by hand.

Cases: an expert with no pair, an expert every token picks (more pairs than a pass takes:
several passes), groups of 32, 64 and 128 (the two K orders), narrow widths (blocks of
fewer warps), float32 x (its hi + lo tf32 parts) and bf16 x and scales (exact in tf32),
1,200 pairs (the warp-wide search's three rounds). `--real`: the model's shapes, E=256,
D=2048, I=512, group 64, bf16, 1,024 pairs, the blocks of a subset of the experts only
(one every token picks, one none picks, six more; ~1-2 minutes on two cores). Not a
benchmark: a check of the index math, the fragment layouts and the precision where no GPU
is at hand. It says nothing of the tensor cores' own summation order, nor of speed.

The tolerance (`tolerances`): the kernel rounds no weight (a nibble is exact in tf32) and
no bf16 x; a float32 operand (x, h) goes in as two tf32 parts, within RHO = 2**-22 of it;
the rest is float32 sums. Both are random-walk errors at the scale of the sum's terms: a
value sum_k t_k (t_k the products the kernel sums, the scale and bias terms apart:
s x q and b x) is within K_SIGMA * (RHO + EPS32 * sqrt(L)) * sqrt(sum_k t_k**2), L the
float32 roundings on its path (as tests/float32_tolerance.py writes the walk, K_SIGMA =
16 standard deviations). h's bound goes into y to first order (the SwiGLU's derivatives),
y's own terms added. Measured: 0.004-0.022 of it (the cases below and --real); h passed as
one tf32 part (its lo part dropped, 2**-11) is 19x over it, and a fragment or staging
layout fault 1e5x and more (tests/kernels/test_moe_grouped.py plants them).
"""
from __future__ import annotations

import argparse
import math
import tempfile

import mlx.core as mx
import numpy as np

import kernels.moe_grouped as mg
from kernels.bench.cuda_shim import PRE, build_and_run, dequantize, kfunc, launch
from kernels.moe_grouped_src import CUDA_DOWN, CUDA_GATE_UP, CUDA_HEADER

EPS32 = 2.0 ** -23
K_SIGMA = 16.0
RHO = 2.0 ** -22          # a float32 operand as tf32 hi + lo, each rounded to nearest


def _routes(rng, N, E, K):
    """Expert ids [N, K]: expert 1 in every row, expert E - 1 in none."""
    rows = [np.concatenate([[1], rng.choice([e for e in range(E - 1) if e != 1], K - 1,
                                             replace=False)]) for _ in range(N)]
    return np.array(rows, np.uint32)


def _bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (round to nearest even), as uint16."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def tolerances(x, idx, scores, gate_up, down, I, GS, split_x):  # noqa: E741
    """(h_ref [P, I], h_tol, y_ref [P, D], y_tol), token-major pairs, float64 (module
    docstring: the walk of the float32 roundings and the tf32 parts)."""
    D = x.shape[1]
    step = 64 if GS % 64 == 0 else 32
    l1 = (1 + split_x) * D / 8 + 2 * D / step + step          # MMAs, folds, a step's x sum
    l2 = 2 * I / 8 + 2 * I / step + step
    w1 = K_SIGMA * (RHO * split_x + EPS32 * math.sqrt(l1))
    w2 = K_SIGMA * (RHO + EPS32 * math.sqrt(l2))
    (gq, gs, gb), (dq, ds, db) = gate_up, down
    N, K = idx.shape
    P = N * K
    h_ref, h_tol = np.zeros((P, I)), np.zeros((P, I))
    y_ref, y_tol = np.zeros((P, D)), np.zeros((P, D))
    x64 = x.astype(np.float64)
    for e in sorted(set(idx.reshape(-1).tolist())):
        pairs = np.nonzero(idx.reshape(-1) == e)[0]
        xe = x64[pairs // K]
        w = dequantize(gq[e], gs[e], gb[e])[:2 * I]               # [2I, D]
        sq = dequantize(gq[e], gs[e], np.zeros_like(gb[e]))[:2 * I]
        bb = dequantize(np.zeros_like(gq[e]), np.zeros_like(gs[e]), gb[e])[:2 * I]
        gu = xe @ w.T
        rss = np.sqrt((xe ** 2) @ (sq ** 2 + bb ** 2).T)
        g, u = gu[:, :I], gu[:, I:]
        sig = 1 / (1 + np.exp(-g))
        h = g * sig * u
        dg = w1 * rss[:, :I] * np.abs(sig * (1 + g * (1 - sig)) * u)
        du = w1 * rss[:, I:] * np.abs(g * sig)
        ht = dg + du + 4 * EPS32 * np.abs(h)                        # exp, divide, multiply
        wd = dequantize(dq[e], ds[e], db[e])                        # [D, I]
        dsq = dequantize(dq[e], ds[e], np.zeros_like(db[e]))
        dbb = dequantize(np.zeros_like(dq[e]), np.zeros_like(ds[e]), db[e])
        sc = np.abs(scores.reshape(-1)[pairs])[:, None].astype(np.float64)
        y = sc * (h @ wd.T)
        yt = sc * (w2 * np.sqrt((h ** 2) @ (dsq ** 2 + dbb ** 2).T)
                   + np.sqrt((ht ** 2) @ (wd ** 2).T)) + EPS32 * np.abs(y)
        h_ref[pairs], h_tol[pairs], y_ref[pairs], y_tol[pairs] = h, ht, y, yt
    return h_ref, h_tol, y_ref, y_tol


def emulate(N, E, K, D, I, GS, pad, seed, dtype="float32", experts=None,  # noqa: E741
            routes=None, sources=None, pre=None) -> float:
    """The two launches on the CPU; the worst error / tolerance over h and y (<= 1:
    within the rounding the kernel makes), printed with the errors. dtype: x's and the
    scales' (float32 or bfloat16); experts: run only these experts' blocks (None: all);
    routes: idx [N, K] (None: _routes); sources: (header, gate_up, down) in place of
    kernels/moe_grouped_src.py's, pre: the shim in place of PRE (planted faults)."""
    header, gate_up_src, down_src = sources or (CUDA_HEADER, CUDA_GATE_UP, CUDA_DOWN)
    rng = np.random.default_rng(seed)
    gu = mx.array(rng.normal(size=(E, 2 * I + pad, D)).astype(np.float32) * D**-0.5)
    dn = mx.array(rng.normal(size=(E, D, I)).astype(np.float32) * I**-0.5)
    q = [np.array(a) for m in (gu, dn) for a in mx.quantize(m, GS, 4)]     # f32 scales
    x = rng.normal(size=(N, D)).astype(np.float32)
    bf16 = dtype == "bfloat16"
    if bf16:                      # the model's: bf16 x, scales and biases
        x = _from_bf16(_bf16(x))
        for i in (1, 2, 4, 5):
            q[i] = _from_bf16(_bf16(q[i]))
    idx = _routes(rng, N, E, K) if routes is None else np.asarray(routes, np.uint32)
    scores = rng.dirichlet(np.ones(K), size=N).astype(np.float32)
    order = np.argsort(idx.reshape(-1), kind="stable").astype(np.uint32)
    eid = idx.reshape(-1)[order].astype(np.uint32)
    P, R = N * K, 2 * I + pad
    plan = mg.plan(D, I, GS)
    (b1, b2), (t1, t2) = plan["blocks"], plan["threads"]
    run = range(E) if experts is None else sorted(experts)
    ft = "bf16_t" if bf16 else "float"
    with tempfile.TemporaryDirectory() as d:
        store = {"x": x, "gs": q[1], "gb": q[2], "ds": q[4], "db": q[5]}
        arrs = {**{k: (_bf16(v) if bf16 else v) for k, v in store.items()},
                "order": order, "eid": eid, "sc": scores.reshape(-1), "gw": q[0], "dw": q[3]}
        for k, v in arrs.items():
            v.tofile(f"{d}/{k}.bin")
        src = (pre or PRE) + header
        src += kfunc("gate_up", gate_up_src,
                     f"const {ft}* x, const uint32_t* order, const int* order_shape,"
                     f" const uint32_t* eid, const uint32_t* w, const {ft}* scales,"
                     f" const {ft}* biases, float* h, int* seg",
                     [("D", D), ("I", I), ("K", K), ("R", R), ("GS", GS)] + plan["gate_up"])
        src += kfunc("down", down_src,
                     "const float* h, const uint32_t* order, const int* seg,"
                     f" const float* scores, const uint32_t* w,"
                     f" const {ft}* scales, const {ft}* biases, float* y",
                     [("D", D), ("I", I), ("GS", GS)] + plan["down"])
        types = {"order": "uint32_t", "eid": "uint32_t", "gw": "uint32_t", "dw": "uint32_t",
                 "sc": "float", **{k: ft for k in store}}
        loads = "".join(f'  {n.upper()} = load<{types[n]}>("{d}/{n}.bin", {a.size});\n'
                        for n, a in arrs.items())
        src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<{ft}> X, GS, GB, DS, DB; std::vector<float> SC, H, Y;
std::vector<uint32_t> ORDER, EID, GW, DW; std::vector<int> SEG; int OS[1] = {{{P}}};
''' + launch("gu", "gate_up(X.data(), ORDER.data(), OS, EID.data(), GW.data(), GS.data(),"
                    " GB.data(), H.data(), SEG.data())",
              [e * b1 + i for e in run for i in range(b1)], t1) \
            + launch("dn", "down(H.data(), ORDER.data(), SEG.data(), SC.data(), DW.data(),"
                      " DS.data(), DB.data(), Y.data())",
                      [e * b2 + i for e in run for i in range(b2)], t2) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
{loads}  H.assign({P * I}, -1e30f); Y.assign({P * D}, -1e30f); SEG.assign({2 * E}, -7);
  run_gu(); run_dn();
  save("{d}/h.bin", H); save("{d}/y.bin", Y);
  FILE* f = fopen("{d}/seg.bin", "wb"); fwrite(SEG.data(), 4, SEG.size(), f); fclose(f);
}}
'''
        build_and_run(src, d)
        h_sorted = np.fromfile(f"{d}/h.bin", np.float32).reshape(P, I)
        y = np.fromfile(f"{d}/y.bin", np.float32).reshape(P, D)
        seg = np.fromfile(f"{d}/seg.bin", np.int32).reshape(E, 2)
    h = np.full((P, I), np.nan)
    h[order] = h_sorted                                   # token-major, as y
    flat = idx.reshape(-1)
    mine = np.isin(flat, list(run))
    bounds = np.searchsorted(eid, np.arange(E + 1))
    want_seg = np.stack([bounds[:-1], bounds[1:]], axis=1)
    assert (seg[list(run)] == want_seg[list(run)]).all(), "seg: an expert's pairs"
    h_ref, h_tol, y_ref, y_tol = tolerances(x, idx, scores, q[0:3], q[3:6], I, GS, not bf16)
    h_ratio = float((np.abs(h - h_ref) / h_tol)[mine].max()) if mine.any() else 0.0
    y_ratio = float((np.abs(y - y_ref) / y_tol)[mine].max()) if mine.any() else 0.0
    wd = {e: np.abs(dequantize(*(a[e] for a in q[3:6]))) for e in set(flat[mine].tolist())}
    mag = np.stack([np.abs(scores.reshape(-1)[p]) * (wd[flat[p]] @ np.abs(h_ref[p]))
                    for p in np.nonzero(mine)[0]]) if mine.any() else np.ones((1, 1))
    ulps = (float((np.abs(y - y_ref)[mine] / mag).max()) if mine.any() else 0.0) / 2.0 ** -24
    counts = np.bincount(flat, minlength=E)
    print(f"N={N} E={E} K={K} D={D} I={I} GS={GS} pad={pad} {dtype}, "
          f"{'all' if experts is None else len(run)} experts ({int(mine.sum())} pairs, "
          f"most {int(counts[list(run)].max())}): max|h - ref| = "
          f"{float(np.abs(h - h_ref)[mine].max()) if mine.any() else 0:.2e} "
          f"({h_ratio:.3f} of its tolerance), max|y - ref| = "
          f"{float(np.abs(y - y_ref)[mine].max()) if mine.any() else 0:.2e} "
          f"({y_ratio:.3f} of its tolerance; {ulps:.1f} ulps of sum|terms|)", flush=True)
    return max(h_ratio, y_ratio)


CASES = [  # (N, E, K, D, I, GS, pad, seed, dtype)
    (6, 8, 3, 128, 128, 32, 32, 0, "float32"),      # groups of 32: one word a lane a step
    (5, 8, 4, 64, 512, 64, 0, 1, "bfloat16"),       # D 64: down blocks of 2 warps
    (3, 3, 2, 128, 2048, 128, 16, 2, "float32"),    # groups of 128; I 2048: 4 K-chunks
    (40, 6, 3, 256, 64, 64, 0, 4, "bfloat16"),      # expert 1: 40 pairs, 3 passes
    (300, 8, 4, 64, 128, 32, 0, 3, "float32"),      # 1,200 pairs: 3 search rounds
]


def real(seed: int = 5) -> float:
    """The model's shapes: E=256, k=8, D=2048, I=512, group 64, bf16, 128 tokens (1,024
    pairs: expert 1 in every row, 128 pairs in 8 passes; expert 255 in none), the blocks
    of 8 experts: those two, the one with the most other pairs, five at random."""
    N, E, K = 128, 256, 8
    rng = np.random.default_rng(seed)
    idx = _routes(rng, N, E, K)
    counts = np.bincount(idx.reshape(-1), minlength=E)
    counts[1] = 0
    others = [int(np.argmax(counts))]
    others += [int(e) for e in rng.choice([e for e in range(2, E - 1) if e not in others],
                                         5, replace=False)]
    return emulate(N, E, K, 2048, 512, 64, 0, seed, "bfloat16", [1, E - 1] + others,
                   routes=idx)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real", action="store_true", help="also the model's shapes (slow)")
    args = p.parse_args(argv)
    worst = max(emulate(*c[:8], dtype=c[8]) for c in CASES)
    if args.real:
        worst = max(worst, real())
    print("OK" if worst <= 1 else "FAILED", f"(worst {worst:.3f} of the tolerance)")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
