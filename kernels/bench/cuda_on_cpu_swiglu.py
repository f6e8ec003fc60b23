"""kernels/swiglu_joined's CUDA body run on the CPU (the shim of kernels/bench/cuda_on_cpu.py)
against float64 numpy: rows of a joined gate_up output with padding after up, N * I not a
multiple of the block. ``python -m kernels.bench.cuda_on_cpu_swiglu`` runs it alone."""
import numpy as np

import kernels.swiglu_joined as sj
from kernels.bench.cuda_shim import PRE, WORK, build_and_run, kfunc, launch

# (N, I, padding after up): SmolLM2's width at B=1; ragged rows; fewer elements than a block
CASES = [(1, 1536, 0), (3, 200, 24), (2, 40, 8)]


def emulate_swiglu(N, I, pad, seed):   # noqa: E741 (I: the MLP's width, as in the model)
    rng = np.random.default_rng(seed)
    W = 2 * I + pad
    a = (rng.standard_normal((N, W)) * 3).astype(np.float32)
    d = WORK
    a.tofile(f"{d}/a.bin")
    src = PRE + kfunc("swiglu", sj._CUDA_SOURCE,
                      "const float* a, const int* a_shape, float* y",
                      [("T", "float"), ("I", I), ("UC", I)])
    blocks = -(-N * I // sj.THREADS)
    src += f'''
std::vector<float> A, Y;
int AS[2] = {{{N}, {W}}};
''' + launch("sw", "swiglu(A.data(), AS, Y.data())", blocks) + f'''
int main() {{
  A.resize({N * W}); FILE* f = fopen("{d}/a.bin", "rb"); fread(A.data(), 4, A.size(), f); fclose(f);
  Y.assign({N * I}, -1e30f); run_sw();
  f = fopen("{d}/y.bin", "wb"); fwrite(Y.data(), 4, Y.size(), f); fclose(f);
}}
'''
    build_and_run(src, d)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, I)
    g, u = a[:, :I].astype(np.float64), a[:, I:2 * I].astype(np.float64)
    want = g / (1 + np.exp(-g)) * u
    err = float((np.abs(y - want) / (np.abs(want) + 1e-30)).max())
    print(f"swiglu_joined N={N} I={I} pad={pad}: max relative err {err:.2e}")
    return err


def main():
    for case in CASES:
        assert emulate_swiglu(*case, seed=11) < 1e-5


if __name__ == "__main__":
    main()
