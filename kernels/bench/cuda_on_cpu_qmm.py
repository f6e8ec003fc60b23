"""``python -m kernels.bench.cuda_on_cpu_qmm``: kernels/qmm_rows.py's CUDA body on the CPU.

The body is compiled by g++ as written (kernels/bench/cuda_shim.py's shim: a block's
threads are std::threads). Its header's two helpers are swapped for CPU versions: the
bf16 rounding (round to nearest even, by bits) and the warp's m16n8k16 product, which
gathers every lane's A and B registers at a warp barrier and computes each lane's D
registers by the PTX ISA's fragment layout. So this checks the body's index math, the
k permutation its A and B share, the split over warps and the partial rows (M not a
multiple of 16), against a float64 numpy product of the same bf16 x and the same
bf16-rounded weights (max error ~1e-6 of the sum of |terms|: float32 sums). Not speed,
and not the tensor cores' own summation order. ~10-60 s a case on two cores.
"""
from __future__ import annotations

import sys

import numpy as np

import kernels.qmm_rows as qr
from kernels.bench.cuda_shim import PRE, build_and_run, kfunc, launch, run_cases
from kernels.qmm_rows_src import CUDA_SOURCE

CPU_HEADER = r'''
uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
inline unsigned bits_of(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float float_of(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned bf16_rne(float f) {
  const unsigned u = bits_of(f);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
unsigned pack_bf16x2(float lo, float hi) { return bf16_rne(lo) | (bf16_rne(hi) << 16); }
inline float bf16_at(unsigned reg, int half) { return float_of(((reg >> (16 * half)) & 0xFFFFu) << 16); }
unsigned g_mma[1024][6];
// The PTX ISA's m16n8k16 layout: lane l = 4 r + q holds A (r, 2q..2q+1), (r+8, 2q..),
// (r, 2q+8..), (r+8, 2q+8..) in a[0..3]; B (2q..2q+1, r), (2q+8.., r) in b[0..1]; D (r,
// 2q..2q+1), (r+8, 2q..2q+1) in d[0..3].
void mma_16816(float* d, const unsigned* a, const unsigned* b) {
  auto& bar = *g_warps[g_tid / 32];
  const int base = (g_tid / 32) * 32, l = g_tid % 32;
  for (int i = 0; i < 4; ++i) g_mma[g_tid][i] = a[i];
  g_mma[g_tid][4] = b[0]; g_mma[g_tid][5] = b[1];
  bar.arrive_and_wait();
  auto A = [&](int row, int kk) {
    const int lane = (row % 8) * 4 + (kk % 8) / 2;
    return bf16_at(g_mma[base + lane][row / 8 + 2 * (kk / 8)], kk % 2);
  };
  auto B = [&](int kk, int n) {
    const int lane = n * 4 + (kk % 8) / 2;
    return bf16_at(g_mma[base + lane][4 + kk / 8], kk % 2);
  };
  const int r = l / 4, q = l % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = r + 8 * (i / 2), col = 2 * q + i % 2;
    float s = 0.f;
    for (int kk = 0; kk < 16; ++kk) s += A(row, kk) * B(kk, col);
    d[i] += s;
  }
  bar.arrive_and_wait();
}
'''


def _bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (round to nearest even), as uint16."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _dequantize(w, s, b, bits) -> np.ndarray:
    per = 32 // bits
    q = (w[..., None] >> (bits * np.arange(per, dtype=np.uint32))) & ((1 << bits) - 1)
    q = q.reshape(w.shape[0], -1).astype(np.float32)
    g = q.shape[1] // s.shape[1]
    return np.repeat(s, g, 1) * q + np.repeat(b, g, 1)          # float32, as the kernel's fmaf


def emulate(M: int, N: int, K: int, GS: int, bits: int, nt: int | None = None,
            ksplit: int | None = None, *, seed: int, work: str) -> float:
    """nt: the 8-column tiles a warp, ksplit: warps a block (qmm_rows.layout's by default;
    the layout sweep's others)."""
    rng = np.random.default_rng(seed)
    x_bits = _bf16(rng.standard_normal((M, K)).astype(np.float32))
    w = rng.integers(0, 2**32, size=(N, K * bits // 32), dtype=np.uint64).astype(np.uint32)
    # scales and biases bf16-representable (the model's are bf16)
    s = _from_bf16(_bf16(rng.uniform(0.5, 1.5, (N, K // GS)).astype(np.float32) / 8 * K**-0.5))
    s = s / (1 << (bits - 4))                              # the same range at 8 bits
    mid = ((1 << bits) - 1) / 2
    b = _from_bf16(_bf16(-mid * s + rng.normal(0, 0.1, s.shape).astype(np.float32) * s))
    for name, arr in {"x": x_bits, "w": w, "s": s, "b": b}.items():
        arr.tofile(f"{work}/{name}.bin")
    default_nt, default_ks = qr.layout(M, N, K)
    nt = default_nt if nt is None else nt
    ks = default_ks if ksplit is None else ksplit
    assert qr.layout_fits(M, N, K, nt, ks)
    mt = -(-M // 16)
    src = PRE + "#include <cstring>\n" + CPU_HEADER + kfunc(
        "qmm", CUDA_SOURCE,
        "const unsigned short* x, const int* x_shape, const uint32_t* w, const int* w_shape,"
        " const float* scales, const float* biases, float* y",
        [("MT", mt), ("NT", nt), ("BITS", bits), ("GS", GS), ("KSPLIT", ks),
         ("OT", "float")])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<unsigned short> X; std::vector<uint32_t> W; std::vector<float> S, B, Y;
int XS[2] = {{{M}, {K}}}, WS[2] = {{{N}, {K * bits // 32}}};
''' + launch("q", "qmm(X.data(), XS, W.data(), WS, S.data(), B.data(), Y.data())",
             N // (8 * nt), threads=32 * ks) + f'''
int main() {{
  X = load<unsigned short>("{work}/x.bin", {M * K}); W = load<uint32_t>("{work}/w.bin", {N * K * bits // 32});
  S = load<float>("{work}/s.bin", {N * K // GS}); B = load<float>("{work}/b.bin", {N * K // GS});
  Y.assign({M * N}, -1e30f);
  run_q();
  FILE* f = fopen("{work}/y.bin", "wb"); fwrite(Y.data(), 4, Y.size(), f); fclose(f);
}}
'''
    build_and_run(src, work)
    y = np.fromfile(f"{work}/y.bin", np.float32).reshape(M, N)
    x = _from_bf16(x_bits).astype(np.float64)
    wf = _dequantize(w, s, b, bits)
    w16 = _from_bf16(_bf16(wf)).astype(np.float64)        # each weight rounded as the kernel does
    ref = x @ w16.T
    mag = np.abs(x) @ np.abs(w16).T
    err = float((np.abs(y - ref) / mag).max())
    unrounded = float((np.abs(y - x @ wf.astype(np.float64).T) / mag).max())
    print(f"M={M} N={N} K={K} GS={GS} bits={bits} (KSPLIT {ks}, {mt} row tiles, NT {nt}): "
          f"max |y - ref| / sum|terms|"
          f" = {err:.2e} (bf16 weights); against unrounded weights {unrounded:.2e}", flush=True)
    return err


CASES = [# NT tiles a warp, `split` warps a block (layout's pick for N from 1024 at one row
         # tile, K < 4096; and every projection's with LAYOUT "uniform")
         (16, 32, 256, 64, 4, qr.NT), (3, 16, 128, 32, 4, qr.NT), (32, 32, 1024, 128, 4, qr.NT),
         (21, 48, 2048, 64, 4, qr.NT), (5, 32, 256, 64, 8, qr.NT), (19, 16, 2048, 64, 8, qr.NT),
         # 4 tiles a warp: 4 and 8 bits, one and two row tiles
         (16, 64, 2048, 64, 4, 4), (19, 32, 256, 32, 8, 4),
         # 8 tiles a warp (one row tile: the partial sums' shared memory)
         (16, 128, 2048, 64, 4, 8), (3, 64, 512, 64, 8, 8),
         # the layout sweep's others (kernels/bench/qmm_rows_sweep.py): one tile a warp,
         # 16 warps a block (K=2048: one 128-weight block a warp), 4 warps with two turns
         (16, 24, 1024, 64, 4, 1), (21, 16, 2048, 64, 4, 2, 16), (7, 8, 1024, 32, 8, 1, 4),
         # qmm_rows.layout's rules: one tile, 8 warps (its pick for a narrow N, 8 bits);
         # 2 tiles, 16 warps at K=4096 (one and two row tiles, 4 and 8 bits); 4 tiles,
         # 4 warps (two row tiles, 4 and 8 bits)
         (16, 40, 2048, 64, 8), (5, 32, 4096, 64, 4, 2, 16), (27, 16, 4096, 128, 8, 2, 16),
         (32, 32, 1024, 64, 4, 4, 4), (18, 64, 512, 32, 8, 4, 4)]


def main(argv: list[str]) -> int:
    return run_cases(emulate, CASES)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
