"""``python -m kernels.bench.cuda_on_cpu_grouped``: kernels/moe_grouped.py's CUDA source run
on the CPU (the shim of kernels/bench/cuda_on_cpu.py: a block's threads as std::threads,
warp shuffles as barriers), against a float64 numpy reference that unpacks the nibbles
by hand. Cases: an expert with no pair, an expert every token picks, hidden sizes whose
down rows take 4, 16 and 32 lanes (8, 2 and 1 rows a warp at once), and 1,200 pairs (the
warp-wide search's three rounds). Not a benchmark:
a check of the index math where no GPU is at hand (~20 s a case on two cores).
"""
import tempfile

import mlx.core as mx
import numpy as np

import kernels.moe_grouped as mg
from kernels.bench.cuda_on_cpu import PRE, _dequantize, build_and_run, kfunc, launch
from kernels.moe_grouped_src import CUDA_DOWN, CUDA_GATE_UP, CUDA_HEADER


def _routes(rng, N, E, K):
    """Expert ids [N, K]: expert 1 in every row, expert E - 1 in none."""
    rows = [np.concatenate([[1], rng.choice([e for e in range(E - 1) if e != 1], K - 1,
                                             replace=False)]) for _ in range(N)]
    return np.array(rows, np.uint32)


def emulate(N, E, K, D, I, GS, pad, seed):  # noqa: E741
    rng = np.random.default_rng(seed)
    gu = mx.array(rng.normal(size=(E, 2 * I + pad, D)).astype(np.float32) * D**-0.5)
    dn = mx.array(rng.normal(size=(E, D, I)).astype(np.float32) * I**-0.5)
    q = [np.array(a) for m in (gu, dn) for a in mx.quantize(m, GS, 4)]     # f32 scales
    x = rng.normal(size=(N, D)).astype(np.float32)
    idx = _routes(rng, N, E, K)
    scores = rng.dirichlet(np.ones(K), size=N).astype(np.float32)
    order = np.argsort(idx.reshape(-1), kind="stable").astype(np.uint32)
    eid = idx.reshape(-1)[order].astype(np.uint32)
    P, R = N * K, 2 * I + pad
    with tempfile.TemporaryDirectory() as d:
        arrs = {"x": x, "order": order, "eid": eid, "sc": scores.reshape(-1),
                "gw": q[0], "gs": q[1], "gb": q[2], "dw": q[3], "ds": q[4], "db": q[5]}
        for k, v in arrs.items():
            v.tofile(f"{d}/{k}.bin")
        src = PRE + CUDA_HEADER
        src += kfunc("gate_up", CUDA_GATE_UP,
                     "const float* x, const uint32_t* order, const int* order_shape,"
                     " const uint32_t* eid, const uint32_t* w, const float* scales,"
                     " const float* biases, float* h, int* seg",
                     [("D", D), ("I", I), ("K", K), ("R", R), ("GS", GS), ("RPW", mg.RPW1)])
        src += kfunc("down", CUDA_DOWN,
                     "const float* h, const uint32_t* order, const int* seg,"
                     " const float* scores, const uint32_t* w,"
                     " const float* scales, const float* biases, float* y",
                     [("D", D), ("I", I), ("GS", GS), ("RPW", mg.RPW2)])
        types = {"order": "uint32_t", "eid": "uint32_t", "gw": "uint32_t", "dw": "uint32_t"}
        loads = "".join(f'  {n.upper()} = load<{types.get(n, "float")}>("{d}/{n}.bin", '
                        f'{a.size});\n' for n, a in arrs.items())
        src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> X, SC, GS, GB, DS, DB, H, Y;
std::vector<uint32_t> ORDER, EID, GW, DW; std::vector<int> SEG; int OS[1] = {{{P}}};
''' + launch("gu", "gate_up(X.data(), ORDER.data(), OS, EID.data(), GW.data(), GS.data(),"
                   " GB.data(), H.data(), SEG.data())", E * (I // (8 * mg.RPW1))) \
            + launch("dn", "down(H.data(), ORDER.data(), SEG.data(), SC.data(), DW.data(),"
                     " DS.data(), DB.data(), Y.data())", E * (D // (8 * mg.RPW2))) + f'''
int main() {{
{loads}  H.assign({P * I}, -1e30f); Y.assign({P * D}, -1e30f); SEG.assign({2 * E}, -7);
  run_gu(); run_dn();
  FILE* f = fopen("{d}/y.bin", "wb"); fwrite(Y.data(), 4, Y.size(), f); fclose(f);
}}
'''
        build_and_run(src, d)
        y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, K, D).sum(axis=1)
    wgu, wd = _dequantize(*q[0:3]), _dequantize(*q[3:6])
    ref = np.zeros((N, D))
    for n in range(N):
        for j, e in enumerate(idx[n]):
            gu_n = wgu[e] @ x[n].astype(np.float64)
            g, u = gu_n[:I], gu_n[I:2 * I]
            ref[n] += scores[n, j] * (wd[e] @ (g / (1 + np.exp(-g)) * u))
    err = float(np.abs(y - ref).max())
    print(f"N={N} E={E} K={K} D={D} I={I} GS={GS} pad={pad}: max|y - ref| = {err:.2e}, "
          f"max|ref| = {np.abs(ref).max():.2f}")
    return err


def main() -> int:
    worst = max(emulate(6, 8, 3, 128, 128, 32, 32, 0),      # down rows of 4 lanes, 8 at once
                emulate(5, 8, 4, 64, 512, 64, 0, 1),        # 16 lanes, 2 rows at once
                emulate(3, 3, 2, 128, 2048, 128, 16, 2),    # 32 lanes, two chunks a lane
                emulate(300, 8, 4, 64, 128, 32, 0, 3))      # 1,200 pairs: 3 search rounds
    print("OK" if worst < 1e-4 else "FAILED", f"(worst {worst:.2e})")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
