"""``python -m kernels.bench.cuda_on_cpu``: CUDA sources of kernels/ run on the CPU.

kernels/moe_experts.py's two kernels and kernels/gdn_conv_step.py's here; the decode
step's others (gated_delta_step alone and with its output norm, add_rms_norm,
gated_rms_norm, attention_prep and the gated pass 2 of paged_attention) in
kernels/bench/cuda_on_cpu_decode.py, run after them, and a prompt chunk's
(kernels/bench/cuda_on_cpu_chunk.py); then kernels/moe_block.py's at small
shapes (kernels/bench/cuda_on_cpu_route.py; run that module for the real E=256, D=2048,
I=512 too).

Not a benchmark: a check of a CUDA source's index math where no GPU is at hand. The
kernel bodies are compiled by g++ (C++20) as written, with the shim of
kernels/bench/cuda_shim.py (each block's threads std::threads, ``__shfl_xor_sync`` and
``__syncthreads`` barriers, the blocks one after another). Inputs are float32 (the bf16
instantiation differs only in its loads' conversions); the result is compared with a
float64 numpy reference that unpacks the nibbles by hand. ~10 s a case on two cores.
"""
import mlx.core as mx
import numpy as np

import kernels.gdn_conv_step as gcs
import kernels.moe_experts as me
import kernels.moe_experts_src as mes
from kernels.bench.cuda_shim import PRE, WORK, build_and_run, dequantize, kfunc, launch


def emulate(N, E, K, D, I, GS, pad, seed, shared=False, res=False, sgc=False,  # noqa: E741
            dedupe=False, tile_major=False, staged=False, staged_down=False, out=None):
    """moe_experts' two kernels; with the shared expert (weight sigmoid(gate), the gate a
    column of a wider array: a view starting there, or with sgc the whole array and the
    column SGC=E, as moe_block reads the router's joined output) and a residual; scores a
    strided view too. dedupe: launch 1 reads each routed expert once for all its tokens
    (moe_experts.DEDUPE_FROM_PAIRS); tile_major: both grids row-tile-major
    (moe_experts.TILE_MAJOR); staged: launch 1 copies its weight rows into shared memory
    first (moe_experts.STAGED, blocks of moe_experts.STAGED_WARPS warps); staged_down:
    launch 2 alike (moe_experts.STAGED_DOWN). out: a list that gets the kernels' y."""
    rng = np.random.default_rng(seed)
    gu = mx.array(rng.normal(size=(E, 2 * I + pad, D)).astype(np.float32) * D**-0.5)
    dn = mx.array(rng.normal(size=(E, D, I)).astype(np.float32) * I**-0.5)
    sgu = mx.array(rng.normal(size=(2 * I + pad, D)).astype(np.float32) * D**-0.5)
    sdn = mx.array(rng.normal(size=(D, I)).astype(np.float32) * I**-0.5)
    q = [np.array(a) for m in (gu, dn, sgu, sdn) for a in mx.quantize(m, GS, 4)]  # f32 scales
    x = rng.normal(size=(N, D)).astype(np.float32)
    idx = np.stack([rng.choice(E, K, replace=False) for _ in range(N)]).astype(np.uint32)
    sc_wide = rng.dirichlet(np.ones(K + 3), size=N).astype(np.float32)   # scores: [:, 1:1+K]
    gate_wide = rng.normal(size=(N, E + 1)).astype(np.float32)           # gate: [:, E]
    resid = rng.normal(size=(N, D)).astype(np.float32)
    d = WORK
    names = ["gw", "gs", "gb", "dw", "ds", "db", "sgw", "sgs", "sgb", "sdw", "sds", "sdb"]
    arrs = {"x": x, "idx": idx, "scx": sc_wide, "gtx": gate_wide, "res": resid,
            **dict(zip(names, q))}
    for k, v in arrs.items():
        v.tofile(f"{d}/{k}.bin")
    R, KK = 2 * I + pad, K + shared
    threads1 = 32 * me.STAGED_WARPS if staged else 256
    nb1 = -(-(N * KK * (I // me.RPW1) * 32) // threads1)
    nb2 = N * (D // (8 * me.RPW2))
    header, gate_up, down = mes._SOURCES["cuda"]
    src = PRE + header
    src += kfunc("gate_up", gate_up,
                 "const float* x, const int* x_shape, const uint32_t* idx, const uint32_t* w,"
                 " const float* scales, const float* biases, const uint32_t* sw,"
                 " const float* ss, const float* sb, float* h",
                 [("D", D), ("I", I), ("K", K), ("R", R), ("RS", R), ("GS", GS),
                  ("RPW", me.RPW1), ("SHARED", int(shared)), ("DEDUPE", int(dedupe)),
                  ("TILE_MAJOR", int(tile_major)), ("STAGED", int(staged))])
    src += kfunc("down", down,
                 "const float* h, const uint32_t* idx, const int64_t* idx_strides,"
                 " const float* scores, const int64_t* scores_strides, const uint32_t* w,"
                 " const float* scales, const float* biases, const uint32_t* sw,"
                 " const float* ss, const float* sb, const float* gate,"
                 " const int64_t* gate_strides, const float* residual,"
                 " const int64_t* residual_strides, float* y",
                 [("OutT", "float"), ("D", D), ("I", I), ("K", K), ("GS", GS),
                  ("RPW", me.RPW2), ("SHARED", int(shared)), ("RES", int(res)),
                  ("SGC", E if sgc else 0), ("TILE_MAJOR", int(tile_major)),
                  ("STAGED_DOWN", int(staged_down))])
    loads = "".join(f'  {n.upper()} = load<{"uint32_t" if n.endswith("w") else "float"}>'
                    f'("{d}/{n}.bin", {a.size});\n' for n, a in arrs.items() if n != "idx")
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> X, GS, GB, DS, DB, SGS, SGB, SDS, SDB, SCX, GTX, RES, H, Y;
std::vector<uint32_t> IDX, GW, DW, SGW, SDW; int XS[1] = {{{N}}};
int64_t IST[2] = {{{K}, 1}}, SST[2] = {{{K + 3}, 1}}, GST[2] = {{{E + 1}, 1}}, RST[2] = {{{D}, 1}};
''' + launch("gu", "gate_up(X.data(), XS, IDX.data(), GW.data(), GS.data(), GB.data(),"
                   " SGW.data(), SGS.data(), SGB.data(), H.data())", nb1, threads1) \
        + launch("dn", "down(H.data(), IDX.data(), IST, SCX.data() + 1, SST, DW.data(), DS.data(),"
                 " DB.data(), SDW.data(), SDS.data(), SDB.data(), GTX.data() + "
                 + str(0 if sgc else E)
                 + ", GST, RES.data(), RST, Y.data())", nb2) + f'''
int main() {{
  IDX = load<uint32_t>("{d}/idx.bin", {N * K});
{loads}  H.assign({N * KK * I}, -1e30f); Y.assign({N * D}, -1e30f);
  run_gu(); run_dn();
  FILE* f = fopen("{d}/y.bin", "wb"); fwrite(Y.data(), 4, Y.size(), f); fclose(f);
}}
'''
    build_and_run(src, d)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, D)
    if out is not None:
        out.append(y)
    ref = _numpy_reference(x, idx, sc_wide[:, 1:1 + K], q[0:3], q[3:6], I)
    if shared:
        wgu, wd = dequantize(*q[6:9]), dequantize(*q[9:12])
        gu_s = x.astype(np.float64) @ wgu.T
        g, u = gu_s[:, :I], gu_s[:, I:2 * I]
        gate = 1 / (1 + np.exp(-gate_wide[:, E:E + 1].astype(np.float64)))
        ref += gate * ((g / (1 + np.exp(-g)) * u) @ wd.T)
    if res:
        ref += resid
    err = float(np.abs(y - ref).max())
    print(f"N={N} E={E} K={K} D={D} I={I} GS={GS} pad={pad} shared={shared} residual={res} "
          f"sgc={sgc} dedupe={dedupe} tile_major={tile_major} staged={staged}/{staged_down} "
          f"({N * K - len(set(idx.ravel().tolist()))} repeats): "
          f"max|y - ref| = {err:.2e}, max|ref| = {np.abs(ref).max():.2f}")
    return err


def _numpy_reference(x, idx, scores, gate_up, down, hidden) -> np.ndarray:
    """float64, nibbles unpacked by hand."""
    wgu, wd = dequantize(*gate_up), dequantize(*down)
    ref = np.zeros((x.shape[0], wd.shape[1]))
    for n, (row, experts) in enumerate(zip(x.astype(np.float64), idx)):
        for j, e in enumerate(experts):
            gu = wgu[e] @ row
            g, u = gu[:hidden], gu[hidden:2 * hidden]
            ref[n] += scores[n, j] * (wd[e] @ (g / (1 + np.exp(-g)) * u))
    return ref


def emulate_conv(B, S, heads, K, fresh_rows, seed):
    """gdn_conv_step on a strided qkv view (a slice of a wider row) and a pool."""
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    rng = np.random.default_rng(seed)
    wide = rng.standard_normal((B, 1, C + 48)).astype(np.float32)      # qkv = wide[..., 16:16+C]
    weight = (rng.standard_normal((C, K, 1)) * 0.5).astype(np.float32)
    pool = rng.standard_normal((S, K - 1, C)).astype(np.float32)
    slots = rng.permutation(S)[:B].astype(np.int32)
    fresh = np.array([b in fresh_rows for b in range(B)], np.int32)
    d = WORK
    for k, v in {"wide": wide, "weight": weight, "pool": pool, "slots": slots,
                 "fresh": fresh}.items():
        v.tofile(f"{d}/{k}.bin")
    nb = -(-(B * (2 * Hk + Hv) * 32) // 256)
    src = PRE + kfunc("conv", gcs._CUDA_SOURCE,
                      "const float* qkv, const int* qkv_shape, const int64_t* qkv_strides,"
                      " int qkv_ndim, const float* weight, const int64_t* weight_strides,"
                      " const float* pool,"
                      " const int64_t* pool_strides, const int* slots, const int* fresh,"
                      " const float* eps, float* q, float* k, float* v",
                      [("OutT", "float"), ("PoolT", "float"), ("Hk", Hk), ("Hv", Hv),
                       ("Dk", Dk), ("Dv", Dv), ("KS", K)])
    W = C + 48
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> WIDE, WT, POOL, Q, K_, V, EPS{{1e-6f}}; std::vector<int> SL, FR;
int QS[3] = {{{B}, 1, {C}}}; int64_t QST[3] = {{{W}, {W}, 1}};
int64_t PST[3] = {{{(K - 1) * C}, {C}, 1}}; int64_t WST[3] = {{{K}, 1, 1}};
''' + launch("cv", "conv(WIDE.data() + 16, QS, QST, 3, WT.data(), WST, POOL.data(), PST, SL.data(),"
                   " FR.data(), EPS.data(), Q.data(), K_.data(), V.data())", nb) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  WIDE = load<float>("{d}/wide.bin", {B * W}); WT = load<float>("{d}/weight.bin", {C * K});
  POOL = load<float>("{d}/pool.bin", {S * (K - 1) * C}); SL = load<int>("{d}/slots.bin", {B});
  FR = load<int>("{d}/fresh.bin", {B});
  Q.assign({B * Hk * Dk}, -1e30f); K_.assign({B * Hk * Dk}, -1e30f); V.assign({B * Hv * Dv}, -1e30f);
  run_cv();
  save("{d}/q.bin", Q); save("{d}/k.bin", K_); save("{d}/v.bin", V); save("{d}/pool2.bin", POOL);
}}
'''
    build_and_run(src, d)
    got = [np.fromfile(f"{d}/{n}.bin", np.float32) for n in ("q", "k", "v", "pool2")]
    # float64 numpy: window = [old (zero when fresh), x]; conv, silu, split, normalise
    x = wide[:, 0, 16:16 + C].astype(np.float64)
    old = np.where(fresh[:, None, None] != 0, 0.0, pool[slots].astype(np.float64))
    window = np.concatenate([old, x[:, None, :]], axis=1)                # [B, K, C]
    y = (window * weight[:, :, 0].T).sum(axis=1)
    y = y / (1 + np.exp(-y))
    kd = Hk * Dk
    q, k, v = (y[:, :kd].reshape(B, Hk, Dk), y[:, kd:2 * kd].reshape(B, Hk, Dk), y[:, 2 * kd:])
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * Dk ** -0.5
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    want_pool = pool.astype(np.float64).copy()
    want_pool[slots] = window[:, 1:]
    err = max(float(np.abs(g - w.reshape(-1)).max())
              for g, w in zip(got, (q, k, v, want_pool)))
    print(f"conv B={B} S={S} heads={heads} K={K} fresh={sorted(fresh_rows)}: max err {err:.2e}")
    return err


if __name__ == "__main__":
    # (N, E, K, D, I, group, pad): every lane busy; fewer chunks than lanes; k = 10
    for case, extra in [((3, 8, 4, 256, 256, 64, 128), {}), ((2, 16, 8, 128, 64, 64, 0), {}),
                        ((1, 8, 8, 1024, 96, 32, 64), {"shared": True}),
                        ((2, 12, 10, 96, 128, 32, 0), {"shared": True, "res": True}),
                        ((2, 12, 10, 96, 128, 32, 0), {"shared": True, "res": True,
                                                       "sgc": True}),
                        ((2, 8, 4, 256, 128, 64, 0), {"res": True}),
                        # a prompt chunk's 520 pairs: past the decode range (experts_to)
                        ((40, 16, 13, 128, 64, 64, 0), {"shared": True, "res": True}),
                        # each routed expert read once for all its tokens
                        ((3, 8, 4, 256, 256, 64, 128), {"dedupe": True}),
                        ((2, 12, 10, 96, 128, 32, 0), {"shared": True, "res": True,
                                                       "dedupe": True}),
                        ((9, 16, 8, 128, 64, 64, 0), {"shared": True, "dedupe": True}),
                        # both grids row-tile-major, alone and with DEDUPE
                        ((5, 8, 4, 128, 64, 64, 0), {"shared": True, "res": True,
                                                     "tile_major": True}),
                        ((9, 16, 8, 128, 64, 64, 0), {"shared": True, "dedupe": True,
                                                      "tile_major": True}),
                        # launch 1's rows staged in shared memory: lanes without a chunk,
                        # a chunk a lane, two a lane; with DEDUPE and TILE_MAJOR
                        ((3, 8, 4, 256, 256, 64, 128), {"staged": True}),
                        ((1, 8, 8, 1024, 96, 32, 64), {"shared": True, "staged": True}),
                        ((2, 8, 4, 2048, 64, 64, 0), {"shared": True, "res": True,
                                                      "staged": True}),
                        ((9, 16, 8, 128, 64, 64, 0), {"shared": True, "dedupe": True,
                                                      "tile_major": True, "staged": True}),
                        # launch 2's rows staged: chunks over lanes unevenly, the shared
                        # expert's among them; with the residual and TILE_MAJOR
                        ((2, 12, 10, 96, 128, 32, 0), {"shared": True, "res": True,
                                                       "staged_down": True}),
                        ((5, 8, 4, 128, 64, 64, 0), {"shared": True, "res": True,
                                                     "tile_major": True, "staged": True,
                                                     "staged_down": True})]:
        assert emulate(*case, seed=1, **extra) < 1e-4
    # (B, slots, (Hk, Hv, Dk, Dv), taps, fresh rows): the real head layout at 2+2+4 heads
    for case in [(3, 5, (2, 4, 128, 128), 4, {1}), (2, 4, (1, 2, 32, 64), 3, set())]:
        assert emulate_conv(*case, seed=2) < 1e-5
    from kernels.bench.cuda_on_cpu_decode import main as decode_main
    decode_main()
    from kernels.bench.cuda_on_cpu_chunk import main as chunk_main
    chunk_main()
    from kernels.bench.cuda_on_cpu_route import main as route_main
    route_main(real=False)
