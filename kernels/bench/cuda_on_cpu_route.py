"""``python -m kernels.bench.cuda_on_cpu_route [--small]``: kernels/moe_block.py's CUDA bodies
on the CPU (~9 minutes on two idle cores; --small: without the real shapes, ~2.5).

The MoE block with its routing inside the experts' two launches, compiled by g++ with
kernels/bench/cuda_shim.py's shim (int shuffles added). Each case runs both ways in
one program: moe_route's body then moe_experts' two bodies (the ids and weights gathered
by the row map), and moe_block's two bodies on the router logits. Checked:

- moe_block's y is bit for bit the two-stage y (the same arithmetic, both orders);
- moe_route's ids are a float64 numpy top-k's (stable: the lower id first on ties) and
  its weights within 1e-6;
- y against a float64 numpy reference (nibbles unpacked by hand, routing in float64).

Router rows have exact ties by construction: a tie across the k-th place (the lower ids
fill the slots), ties in one lane (experts e, e+32, e+64) and across lanes, and rows of
logits rounded to halves. x and the logits are strided views (the logits columns of a
wider joined router row, the shared gate its column E), as the model hands them over.
The weights are random 4-bit words with random scales and biases (no quantize: at the
real E=256, D=2048, I=512 a float copy of the experts would take 2 GB).
"""
from __future__ import annotations

import subprocess
import tempfile
import time

import numpy as np

import kernels.moe_block as mb
import kernels.moe_block_src as mbs
import kernels.moe_experts_src as mes
import kernels.moe_route as mr
from kernels.bench.cuda_shim import PRE, kfunc, launch

SHIM = r'''
#include <cstring>
int g_ibuf[256];
int __shfl_xor_sync(unsigned, int v, int off) {
  auto& b = *g_warps[g_tid / 32];
  g_ibuf[g_tid] = v; b.arrive_and_wait();
  int o = g_ibuf[(g_tid / 32) * 32 + ((g_tid % 32) ^ off)]; b.arrive_and_wait();
  return o;
}
float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
template <class T> std::vector<T> load(const char* n, size_t c) {
  std::vector<T> v(c); FILE* f = fopen(n, "rb");
  if (fread(v.data(), sizeof(T), c, f) != c) { fprintf(stderr, "short %s\n", n); exit(1); }
  fclose(f); return v; }
template <class T> void save(const char* n, const std::vector<T>& v) {
  FILE* f = fopen(n, "wb"); fwrite(v.data(), sizeof(T), v.size(), f); fclose(f); }
'''

_W = ["gw", "gs", "gb", "dw", "ds", "db", "sgw", "sgs", "sgb", "sdw", "sds", "sdb"]


def make_weights(E, D, I, GS, pad, seed, d):  # noqa: E741
    """Random 4-bit experts (and a shared one) written to d; returns them for numpy."""
    rng = np.random.default_rng(seed)

    def part(lead, rows, cols):
        w = rng.integers(0, 2 ** 32, size=(*lead, rows, cols // 8), dtype=np.uint32)
        s = (np.abs(rng.standard_normal((*lead, rows, cols // GS))) * cols ** -0.5 / 4)
        b = -7.5 * s + rng.standard_normal(s.shape) * cols ** -0.5 * 0.1
        return [w, s.astype(np.float32), b.astype(np.float32)]
    arrs = (part((E,), 2 * I + pad, D) + part((E,), D, I) + part((), 2 * I + pad, D)
            + part((), D, I))
    for n, a in zip(_W, arrs):
        a.tofile(f"{d}/{n}.bin")
    return arrs


def router_rows(N, E, K, rng) -> np.ndarray:
    """[N, E] float32 logits, row r with tie pattern r % 4 (see the module docstring)."""
    out = rng.standard_normal((N, E)).astype(np.float32) * 2
    for r in range(N):
        row, order = out[r], np.argsort(-out[r], kind="stable")
        if r % 4 == 1:                                   # ties across the k-th place
            lo, hi = max(K - 3, 0), min(K + 3, E)
            row[order[lo:hi]] = row[order[min(K - 1, E - 1)]]
        elif r % 4 == 2:                                 # one lane, and across lanes
            top = row.max() + 1
            for e in (5, 37, 69, 4, 36):
                if e < E:
                    row[e] = top
        elif r % 4 == 3:                                 # logits on a coarse grid
            out[r] = np.round(row * 2) / 2
    return out


def numpy_route(logits, K, norm):
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    idx = np.argsort(-p, axis=-1, kind="stable")[:, :K]
    w = np.take_along_axis(p, idx, -1)
    return idx, (w / w.sum(-1, keepdims=True) if norm else w)


def _dq(w, s, b) -> np.ndarray:
    q = (w[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    q = q.reshape(*w.shape[:-1], -1).astype(np.float64)
    g = q.shape[-1] // s.shape[-1]
    return q * np.repeat(s.astype(np.float64), g, -1) + np.repeat(b.astype(np.float64), g, -1)


def numpy_block(x, idx, w, weights, I, gate=None, res=None):  # noqa: E741
    """float64: sum_j w_j Wd[e] swiglu(Wgu[e] x), + sigmoid(gate) * shared, + res."""
    gw, gs, gb, dw, ds, db, sgw, sgs, sgb, sdw, sds, sdb = weights
    y = np.zeros((x.shape[0], dw.shape[1]))

    def expert(gu_w, d_w, row):
        gu = gu_w @ row
        g, u = gu[:I], gu[I:2 * I]
        return d_w @ (g / (1 + np.exp(-g)) * u)
    for n, row in enumerate(x.astype(np.float64)):
        for j, e in enumerate(idx[n]):
            y[n] += w[n, j] * expert(_dq(gw[e], gs[e], gb[e]), _dq(dw[e], ds[e], db[e]), row)
        if gate is not None:
            sg = 1 / (1 + np.exp(-np.float64(gate[n])))
            y[n] += sg * expert(_dq(sgw, sgs, sgb), _dq(sdw, sds, sdb), row)
    return y if res is None else y + res


GATE_UP_ARGS = ("const uint32_t* w, const float* scales, const float* biases,"
                " const uint32_t* sw, const float* ss, const float* sb")


def _program(N, E, K, D, I, GS, pad, shared, res, norm, rows, d) -> str:  # noqa: E741
    R, KK = 2 * I + pad, K + shared
    XW, LW = D + 8, E + 8                     # x = XW[:, 3:3+D], logits = LW[:, :E], gate LW[:, E]
    common = [("D", D), ("I", I), ("K", K), ("GS", GS)]
    gu_t = common + [("R", R), ("RS", R), ("RPW", mb.RPW1), ("SHARED", int(shared)),
                     ("DEDUPE", 0), ("TILE_MAJOR", 0), ("STAGED", 0)]
    dn_t = [("OutT", "float")] + common + [("RPW", mb.RPW2), ("SHARED", int(shared)),
                                           ("RES", int(res)), ("TILE_MAJOR", 0),
                                           ("STAGED_DOWN", 0)]
    routed = [("E", E), ("ROWS", int(rows))]
    _, idx_gu, idx_dn = mes._SOURCES["cuda"]
    header, blk_gu, blk_dn = mbs.SOURCES["cuda"]
    down_tail = (GATE_UP_ARGS + ", const float* gate, const int64_t* gate_strides,"
                 " const float* residual, const int64_t* residual_strides, float* y")
    src = PRE + SHIM + mr._KERNEL.headers["cuda"] + header
    src += kfunc("route", mr._CUDA_SOURCE, "const float* logits, const int* logits_shape,"
                 " const int64_t* logits_strides, int* indices, float* weights",
                 [("E", E), ("K", K), ("NORM", int(norm))])
    src += kfunc("gu_idx", idx_gu, "const float* x, const int* x_shape, const int* idx, "
                 + GATE_UP_ARGS + ", float* h", gu_t)
    src += kfunc("dn_idx", idx_dn, "const float* h, const int* idx, const int64_t* idx_strides,"
                 " const float* scores, const int64_t* scores_strides, " + down_tail,
                 dn_t + [("SGC", 0)])
    src += kfunc("gu_blk", blk_gu, "const float* x, const int* x_shape, const int64_t* x_strides,"
                 " const float* logits, const int64_t* logits_strides, const int* row_map,"
                 " const int64_t* row_map_strides, " + GATE_UP_ARGS + ", float* h", gu_t + routed)
    src += kfunc("dn_blk", blk_dn, "const float* h, const float* logits,"
                 " const int64_t* logits_strides, const int* row_map, const int64_t* row_map_strides, "
                 + down_tail, dn_t + routed + [("NORM", int(norm)), ("SGC", E)])
    nb1 = -(-(N * KK * (I // mb.RPW1) * 32) // 256)
    nb2 = N * (D // (8 * mb.RPW2))
    wts = ("GW.data(), GS.data(), GB.data(), SGW.data(), SGS.data(), SGB.data()",
           "DW.data(), DS.data(), DB.data(), SDW.data(), SDS.data(), SDB.data()")
    # the gate: a view at column E (moe_experts), or the joined row read at column SGC=E
    # (moe_block, as the model hands the router's output over unsplit)
    tail = f"LWV.data() + {E}, GST, RES.data(), RST, Y.data()"
    tail_blk = "LWV.data(), GST, RES.data(), RST, Y.data()"
    src += f'''
std::vector<float> XWV, XD, LWV, RES, H, Y, WALL, W, GS, GB, DS, DB, SGS, SGB, SDS, SDB;
std::vector<uint32_t> GW, DW, SGW, SDW; std::vector<int> ROWV, IALL, IDX;
int XS[2] = {{{N}, {D}}}, LS[2] = {{{N}, {E}}};
int64_t XST[2] = {{{XW}, 1}}, LST[2] = {{{LW}, 1}}, GST[2] = {{{LW}, 1}}, RST[2] = {{{D}, 1}};
int64_t ROST[1] = {{1}}, KST[2] = {{{K}, 1}};
''' + launch("route", "route(LWV.data(), LS, LST, IALL.data(), WALL.data())",
                  -(-N * 32 // 256)) \
        + launch("gu_idx", f"gu_idx(XD.data(), XS, IDX.data(), {wts[0]}, H.data())", nb1) \
        + launch("dn_idx", f"dn_idx(H.data(), IDX.data(), KST, W.data(), KST, {wts[1]}, {tail})",
                 nb2) \
        + launch("gu_blk", "gu_blk(XWV.data() + 3, XS, XST, LWV.data(), LST, ROWV.data(), ROST, "
                 f"{wts[0]}, H.data())", nb1) \
        + launch("dn_blk", "dn_blk(H.data(), LWV.data(), LST, ROWV.data(), ROST, "
                 f"{wts[1]}, {tail_blk})", nb2)
    loads = "".join(f'  {n.upper()} = load<{"uint32_t" if n.endswith("w") else "float"}>'
                    f'("{d}/{n}.bin", {size});\n' for n, size in _sizes(E, D, I, GS, pad).items())
    src += f'''
int main() {{
{loads}  XWV = load<float>("{d}/xw.bin", {N * XW}); LWV = load<float>("{d}/lw.bin", {N * LW});
  RES = load<float>("{d}/res.bin", {N * D}); ROWV = load<int>("{d}/rows.bin", {N});
  XD.resize({N * D});
  for (int n = 0; n < {N}; ++n) {{        // the dense copy MLX makes for a row-contiguous x
    for (int c = 0; c < {D}; ++c) XD[n * {D} + c] = XWV[n * {XW} + 3 + c];
  }}
  IALL.assign({N * K}, -1); WALL.assign({N * K}, -1e30f); IDX.resize({N * K}); W.resize({N * K});
  run_route();
  for (int n = 0; n < {N}; ++n) for (int j = 0; j < {K}; ++j) {{   // the row map's gather
    IDX[n * {K} + j] = IALL[ROWV[n] * {K} + j]; W[n * {K} + j] = WALL[ROWV[n] * {K} + j]; }}
  H.assign({N * KK * I}, -1e30f); Y.assign({N * D}, -1e30f);
  run_gu_idx(); run_dn_idx(); save("{d}/y_two.bin", Y);
  H.assign({N * KK * I}, -1e30f); Y.assign({N * D}, -1e30f);
  run_gu_blk(); run_dn_blk(); save("{d}/y_blk.bin", Y);
  save("{d}/idx.bin", IDX); save("{d}/w.bin", W);
}}
'''
    return src


def _sizes(E, D, I, GS, pad) -> dict:  # noqa: E741
    R = 2 * I + pad
    s = [E * R * D // 8, E * R * D // GS, E * R * D // GS, E * D * I // 8, E * D * I // GS,
         E * D * I // GS, R * D // 8, R * D // GS, R * D // GS, D * I // 8, D * I // GS,
         D * I // GS]
    return dict(zip(_W, s))


def emulate(N, E, K, D, I, GS, pad, weights, d, seed=0, shared=True, res=True, norm=True,  # noqa: E741
            rows=None):
    """One case; weights from make_weights(E, D, I, GS, pad, .., d). rows: the row map
    (padding rows' entries 0) or None. Returns (max |y - ref|, max |w - ref|)."""
    rng = np.random.default_rng(seed)
    xw = rng.standard_normal((N, D + 8)).astype(np.float32)
    lw = rng.standard_normal((N, E + 8)).astype(np.float32)
    lw[:, :E] = router_rows(N, E, K, rng)
    resid = rng.standard_normal((N, D)).astype(np.float32)
    rmap = np.arange(N, dtype=np.int32) if rows is None else np.asarray(rows, np.int32)
    for n, a in {"xw": xw, "lw": lw, "res": resid, "rows": rmap}.items():
        a.tofile(f"{d}/{n}.bin")
    src = _program(N, E, K, D, I, GS, pad, shared, res, norm, rows is not None, d)
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    t0 = time.perf_counter()
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w", f"{d}/emu.cpp", "-o",
                    f"{d}/emu"], check=True)
    subprocess.run([f"{d}/emu"], check=True)
    y_two, y_blk = (np.fromfile(f"{d}/{n}.bin", np.float32).reshape(N, D)
                    for n in ("y_two", "y_blk"))
    idx = np.fromfile(f"{d}/idx.bin", np.int32).reshape(N, K)
    w = np.fromfile(f"{d}/w.bin", np.float32).reshape(N, K)
    want_idx, want_w = numpy_route(lw[rmap, :E], K, norm)
    assert np.array_equal(idx, want_idx), (idx, want_idx)
    assert np.array_equal(y_blk.view(np.uint32), y_two.view(np.uint32)), \
        float(np.abs(y_blk - y_two).max())
    ref = numpy_block(xw[:, 3:3 + D], want_idx, want_w, weights, I,
                      lw[:, E] if shared else None, resid if res else None)
    err, werr = float(np.abs(y_blk - ref).max()), float(np.abs(w - want_w).max())
    print(f"N={N} E={E} K={K} D={D} I={I} GS={GS} pad={pad} shared={shared} residual={res} "
          f"norm={norm} rows={None if rows is None else list(rows)}: ids = numpy's, y = the "
          f"two-stage y bit for bit; max|y - ref| = {err:.2e} (max|ref| {np.abs(ref).max():.2f}),"
          f" max|w - ref| = {werr:.1e} [{time.perf_counter() - t0:.0f} s]", flush=True)
    return err, werr


# (N, E, K, D, I, GS, pad), options: small shapes first (every lane busy or not, k = 10
# and k = E = 32, E = 1024: 32 experts a lane, k = 1), then the real E=256 k=8 D=2048 I=512 g64
SMALL = [((3, 64, 4, 256, 256, 64, 128), {}),
         ((4, 64, 4, 256, 256, 64, 128), {"rows": [0, 1, 0, 0], "norm": False}),
         ((2, 96, 10, 96, 128, 32, 0), {"shared": False, "res": False}),
         ((1, 32, 32, 128, 64, 64, 0), {"res": False}),
         ((2, 1024, 8, 128, 64, 64, 0), {"shared": False}),
         ((2, 32, 1, 128, 64, 64, 0), {"rows": [0, 0]})]
REAL = (256, 8, 2048, 512, 64, 128)
REAL_CASES = [(1, {}), (2, {"shared": False, "res": False}), (3, {"rows": [0, 1, 2]}),
              (4, {"rows": [0, 1, 0, 0]}), (4, {"norm": False})]


def main(real: bool = True) -> None:
    with tempfile.TemporaryDirectory(prefix="cuda_on_cpu_route_") as d:
        errs = []
        for (N, E, K, D, I, GS, pad), opts in SMALL:  # noqa: E741
            weights = make_weights(E, D, I, GS, pad, seed=E + K, d=d)
            errs.append(emulate(N, E, K, D, I, GS, pad, weights, d, seed=N, **opts))
        if real:
            E, K, D, I, GS, pad = REAL  # noqa: E741
            weights = make_weights(E, D, I, GS, pad, seed=1, d=d)
            for N, opts in REAL_CASES:
                errs.append(emulate(N, E, K, D, I, GS, pad, weights, d, seed=10 + N, **opts))
        y_err, w_err = max(e for e, _ in errs), max(w for _, w in errs)
        print(f"moe_block on the CPU: max|y - ref| {y_err:.2e}, max|w - ref| {w_err:.1e}")
        assert y_err < 1e-4 and w_err < 1e-6


if __name__ == "__main__":
    import sys
    main(real="--small" not in sys.argv[1:])
