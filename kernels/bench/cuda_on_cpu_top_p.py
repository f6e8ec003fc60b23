"""``python -m kernels.bench.cuda_on_cpu_top_p``: kernels/top_p_cut.py's CUDA source on the CPU.

Not a benchmark: a check of the source's index math and bin choice where no GPU is at
hand, with kernels/bench/cuda_on_cpu.py's shim (a block's 256 threads as std::threads;
the GPU launches 1,024). Each row's cut is checked against its definition in float64:
the mass of the ids strictly likelier than the cut is below target, and with the cut's
own ids it reaches it, up to the float32 bound of the tests.
"""
import tempfile

import numpy as np

import kernels.top_p_cut as tpc
from kernels.bench.cuda_on_cpu import PRE, build_and_run, kfunc, launch

# CUDA's vector types as the kernel reads them (four ids a load)
VECTORS = "struct int4 { int x, y, z, w; };\nstruct float4 { float x, y, z, w; };\n"


def emulate(key: np.ndarray, w: np.ndarray, target: np.ndarray, work: str) -> np.ndarray:
    rows, V = key.shape
    key.astype(np.int32).tofile(f"{work}/k.bin")
    w.astype(np.float32).tofile(f"{work}/w.bin")
    target.astype(np.float32).tofile(f"{work}/t.bin")
    src = PRE + VECTORS + kfunc("cut", tpc._PASS_LOOP_CUDA,
                      "const int* key, const int* key_shape, const float* weights,"
                      " const float* target, int* cut", [])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<int> K, C; std::vector<float> W, T; int KS[2] = {{{rows}, {V}}};
''' + launch("cut", "cut(K.data(), KS, W.data(), T.data(), C.data())", rows) + f'''
int main() {{
  K = load<int>("{work}/k.bin", {rows * V}); W = load<float>("{work}/w.bin", {rows * V});
  T = load<float>("{work}/t.bin", {rows}); C.assign({rows}, -1);
  run_cut();
  FILE* f = fopen("{work}/c.bin", "wb"); fwrite(C.data(), 4, C.size(), f); fclose(f);
}}
'''
    build_and_run(src, work)
    return np.fromfile(f"{work}/c.bin", np.int32)


def miss(key, w, target, cut) -> float:
    """How far each cut misses its definition, as a share of the row's mass (float64)."""
    w64 = w.astype(np.float64)
    below = np.where(key < cut[:, None], w64, 0).sum(-1)
    upto = np.where(key <= cut[:, None], w64, 0).sum(-1)
    return float(np.max(np.maximum(below - target, target - upto) / w64.sum(-1)))


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
            bound = (np.log2(V) + 2) * 2.0 ** -23
            print(f"V={V} scale={scale:.2f} top_p={p}: cuts {cut.tolist()}, "
                  f"miss {miss(key, w, target, cut):.2e} (bound {bound:.1e})", flush=True)


if __name__ == "__main__":
    main()
