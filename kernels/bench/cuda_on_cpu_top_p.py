"""``python -m kernels.bench.cuda_on_cpu_top_p``: kernels/top_p_cut.py's CUDA source on the CPU.

Not a benchmark: a check of the source's index math, the passes' hand-over and the bin
choice where no GPU is at hand, with kernels/bench/cuda_shim.py's shim (a block's 256
threads as std::threads, as the GPU launches them; the blocks one after another, the
9 launches in order). Each row's cut is checked against its definition in float64: the
mass of the ids strictly likelier than the cut is below target, and with the cut's own
ids it reaches it, up to tpc.depth(V) roundings of the row's mass.
"""
import tempfile

import numpy as np

import kernels.top_p_cut as tpc
import kernels.top_p_cut_src as tps
from kernels.bench.cuda_shim import PRE, build_and_run, kfunc, launch

# CUDA's vector types as the kernel reads them (four ids a load)
VECTORS = "struct int4 { int x, y, z, w; };\n"


def emulate(key: np.ndarray, w: np.ndarray, target: np.ndarray, work: str) -> np.ndarray:
    """The CUDA path's launches in order (tpc.kernel's: the 8 passes, then the cut), each
    a grid of blocks_per_row(V) blocks a row of tpc.THREADS threads, as the GPU runs them."""
    rows, V = key.shape
    nb = tpc.blocks_per_row(V)
    key.astype(np.int32).tofile(f"{work}/k.bin")
    w.astype(np.float32).tofile(f"{work}/w.bin")
    target.astype(np.float32).tofile(f"{work}/t.bin")
    src = PRE + VECTORS
    src += kfunc("pass_", tps.PASS_CUDA,
                 "const int* key, const int* key_shape, const float* weights,"
                 " const float* target, const int* pass_no, const float* part_in,"
                 " const int* prefix_in, const float* before_in, float* part, int* prefix,"
                 " float* before", [])
    src += kfunc("ties", tps.TIES_CUDA,
                 "const int* key, const int* key_shape, const float* weights,"
                 " const float* target, const float* part_in, const int* prefix_in,"
                 " const float* before_in, int* cut, float* cut_before, int* ties,"
                 " float* tie_w", [])
    src += kfunc("last", tps.LAST_CUDA,
                 "const int* key, const int* key_shape, const float* target, const int* cut,"
                 " const float* cut_before, const int* ties, const int* ties_shape,"
                 " const float* tie_w, int* out", [])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<int> K, C, P0, P1, N, O; std::vector<float> W, T, A0, A1, B0, B1, CB, NW;
int KS[2] = {{{rows}, {V}}}, NS[2] = {{{rows}, {nb}}}, PASS[1];
''' + launch("pass_", "pass_(K.data(), KS, W.data(), T.data(), PASS, A0.data(), P0.data(),"
                " B0.data(), A1.data(), P1.data(), B1.data())", rows * nb, tpc.THREADS) \
        + launch("ties", "ties(K.data(), KS, W.data(), T.data(), A0.data(), P0.data(), B0.data(),"
                 " C.data(), CB.data(), N.data(), NW.data())", rows * nb, tpc.THREADS) \
        + launch("last", "last(K.data(), KS, T.data(), C.data(), CB.data(), N.data(), NS,"
                 " NW.data(), O.data())", rows, tpc.THREADS) + f'''
int main() {{
  K = load<int>("{work}/k.bin", {rows * V}); W = load<float>("{work}/w.bin", {rows * V});
  T = load<float>("{work}/t.bin", {rows}); C.assign({rows}, -1); CB.assign({rows}, NAN);
  A0.assign({rows * nb * 16}, NAN); A1 = A0; P0.assign({rows}, -1); P1 = P0;
  B0.assign({rows}, NAN); B1 = B0; N.assign({rows * nb}, -1); NW.assign({rows * nb}, NAN);
  O.assign({2 * rows}, -2);
  for (int p = 0; p < 8; ++p) {{                 // one launch a pass; its outputs the next's inputs
    PASS[0] = p; run_pass_(); std::swap(A0, A1); std::swap(P0, P1); std::swap(B0, B1);
  }}
  run_ties();
  run_last();
  FILE* f = fopen("{work}/c.bin", "wb"); fwrite(O.data(), 4, O.size(), f); fclose(f);
}}
'''
    build_and_run(src, work)
    return np.fromfile(f"{work}/c.bin", np.int32).reshape(rows, 2)


def miss(key, w, target, out) -> float:
    """How far each row's kept set misses top-p's definition, as a share of the row's
    mass (float64): the ids likelier than the cut and the cut's ties up to `last` (out
    [B, 2]: cut, last) hold at least target, and without the last tie less than it. The
    kept set is a prefix of the ids in a stable sort by probability, so this is the
    top-p set, and the cut right, within the returned miss."""
    w64, t = w.astype(np.float64), np.asarray(target, np.float64).reshape(-1, 1)
    cut, last = out[:, :1], out[:, 1:]
    at = key == cut
    kept = (key < cut) | (at & (np.arange(key.shape[1]) <= last))
    mass = np.where(kept, w64, 0).sum(-1, keepdims=True)
    tie = np.where(at, w64, 0).max(-1, keepdims=True)
    return float(np.max(np.maximum(mass - tie - t, t - mass) / w64.sum(-1, keepdims=True)))


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as work:
        for V, scale, p in [(5003, 3.0, 0.95), (49152, 3 / 0.7, 0.95), (4096, 0.2, 0.5),
                            (300, 12.0, 0.9), (248_320, 3 / 0.7, 0.95)]:
            logits = rng.standard_normal((3, V)).astype(np.float32) * scale
            logits[1] = np.round(logits[1] * 2) / 2                       # ties
            logits[2, ::37] = -np.inf                                     # dropped ids
            d = logits - logits.max(-1, keepdims=True)
            w = np.exp2(d * 1.4426950408889634).astype(np.float32)
            key = (np.float32(0) - d).view(np.int32)
            target = (p * w.astype(np.float64).sum(-1)).astype(np.float32)
            cut = emulate(key, w, target, work)
            bound = tpc.depth(V) * 2.0 ** -24
            print(f"V={V} scale={scale:.2f} top_p={p}: cut, last {cut.tolist()}, "
                  f"miss {miss(key, w, target, cut):.2e} (bound {bound:.1e})", flush=True)


if __name__ == "__main__":
    main()
