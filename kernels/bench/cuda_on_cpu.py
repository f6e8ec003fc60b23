"""``python -m kernels.bench.cuda_on_cpu``: CUDA sources of kernels/ run on the CPU.

kernels/moe_experts.py's two kernels, kernels/gdn_conv_step.py's and
kernels/gated_delta_step.py's (raw gates, strided views), kernels/add_rms_norm.py's,
kernels/gated_rms_norm.py's, kernels/attention_prep.py's and the gated pass 2 of
kernels/paged_attention.py.

Not a benchmark: a check of a CUDA source's index math where no GPU is at hand. The
kernel bodies are compiled by g++ (C++20) as written, with a shim: each block's 256
threads are std::threads, ``__shfl_xor_sync`` and ``__syncthreads`` are barriers, and
the blocks run one after another. Inputs are float32 (the bf16 instantiation differs
only in its loads' conversions); the result is compared with a float64 numpy
reference that unpacks the nibbles by hand. ~10 s a case on two cores.
"""
import subprocess
import tempfile

import mlx.core as mx
import numpy as np

import kernels.add_rms_norm as arn
import kernels.attention_prep as ap
import kernels.gated_delta_step as gds
import kernels.gated_rms_norm as grn
import kernels.gdn_conv_step as gcs
import kernels.moe_experts as me
import kernels.moe_experts_src as mes
import kernels.paged_attention_src as pas

PRE = r'''
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstddef>
#include <memory>
struct uint4 { unsigned x, y, z, w; };
struct D3 { int x, y, z; };
thread_local D3 blockIdx, threadIdx;
D3 blockDim{256, 1, 1};
std::barrier<>* g_block;
std::vector<std::unique_ptr<std::barrier<>>> g_warps;
float g_buf[256];
thread_local int g_tid;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() g_block->arrive_and_wait()
float __shfl_xor_sync(unsigned, float v, int off) {
  auto& b = *g_warps[g_tid / 32];
  g_buf[g_tid] = v; b.arrive_and_wait();
  float o = g_buf[(g_tid / 32) * 32 + ((g_tid % 32) ^ off)]; b.arrive_and_wait();
  return o;
}
float __expf(float x) { return std::exp(x); }
float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
'''

def kfunc(name, src, args, templates):
    s = f"void {name}({args}) {{\n"
    for k, v in templates:
        s += f"  using {k} = {v};\n" if isinstance(v, str) else f"  constexpr int {k} = {v};\n"
    return s + src + "\n}\n"

def launch(name, call, nblocks):
    return f'''
void run_{name}() {{
  for (int b = 0; b < {nblocks}; ++b) {{
    std::barrier<> blk(256); g_block = &blk;
    g_warps.clear(); for (int w = 0; w < 8; ++w) g_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> ts;
    for (int t = 0; t < 256; ++t) ts.emplace_back([=]() {{
      blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}}; g_tid = t; {call}; }});
    for (auto& t : ts) t.join();
  }}
}}
'''

def emulate(N, E, K, D, I, GS, pad, seed, shared=False, res=False):  # noqa: E741
    """moe_experts' two kernels; with the shared expert (weight sigmoid(gate), the gate a
    column of a wider array) and a residual; scores a strided view too."""
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
    nb1 = -(-(N * KK * (I // me.RPW1) * 32) // 256)
    nb2 = N * (D // (8 * me.RPW2))
    src = PRE + mes._CUDA_HEADER
    src += kfunc("gate_up", mes._CUDA_GATE_UP,
                 "const float* x, const int* x_shape, const uint32_t* idx, const uint32_t* w,"
                 " const float* scales, const float* biases, const uint32_t* sw,"
                 " const float* ss, const float* sb, float* h",
                 [("D", D), ("I", I), ("K", K), ("R", R), ("RS", R), ("GS", GS),
                  ("RPW", me.RPW1), ("SHARED", int(shared))])
    src += kfunc("down", mes._CUDA_DOWN,
                 "const float* h, const uint32_t* idx, const int64_t* idx_strides,"
                 " const float* scores, const int64_t* scores_strides, const uint32_t* w,"
                 " const float* scales, const float* biases, const uint32_t* sw,"
                 " const float* ss, const float* sb, const float* gate,"
                 " const int64_t* gate_strides, const float* residual,"
                 " const int64_t* residual_strides, float* y",
                 [("OutT", "float"), ("D", D), ("I", I), ("K", K), ("GS", GS),
                  ("RPW", me.RPW2), ("SHARED", int(shared)), ("RES", int(res))])
    loads = "".join(f'  {n.upper()} = load<{"uint32_t" if n.endswith("w") else "float"}>'
                    f'("{d}/{n}.bin", {a.size});\n' for n, a in arrs.items() if n != "idx")
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> X, GS, GB, DS, DB, SGS, SGB, SDS, SDB, SCX, GTX, RES, H, Y;
std::vector<uint32_t> IDX, GW, DW, SGW, SDW; int XS[1] = {{{N}}};
int64_t IST[2] = {{{K}, 1}}, SST[2] = {{{K + 3}, 1}}, GST[2] = {{{E + 1}, 1}}, RST[2] = {{{D}, 1}};
''' + launch("gu", "gate_up(X.data(), XS, IDX.data(), GW.data(), GS.data(), GB.data(),"
                   " SGW.data(), SGS.data(), SGB.data(), H.data())", nb1) \
        + launch("dn", "down(H.data(), IDX.data(), IST, SCX.data() + 1, SST, DW.data(), DS.data(),"
                 " DB.data(), SDW.data(), SDS.data(), SDB.data(), GTX.data() + " + str(E)
                 + ", GST, RES.data(), RST, Y.data())", nb2) + f'''
int main() {{
  IDX = load<uint32_t>("{d}/idx.bin", {N * K});
{loads}  H.assign({N * KK * I}, -1e30f); Y.assign({N * D}, -1e30f);
  run_gu(); run_dn();
  FILE* f = fopen("{d}/y.bin", "wb"); fwrite(Y.data(), 4, Y.size(), f); fclose(f);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, D)
    ref = _numpy_reference(x, idx, sc_wide[:, 1:1 + K], q[0:3], q[3:6], I)
    if shared:
        wgu, wd = _dequantize(*q[6:9]), _dequantize(*q[9:12])
        gu_s = x.astype(np.float64) @ wgu.T
        g, u = gu_s[:, :I], gu_s[:, I:2 * I]
        gate = 1 / (1 + np.exp(-gate_wide[:, E:E + 1].astype(np.float64)))
        ref += gate * ((g / (1 + np.exp(-g)) * u) @ wd.T)
    if res:
        ref += resid
    err = float(np.abs(y - ref).max())
    print(f"N={N} E={E} K={K} D={D} I={I} GS={GS} pad={pad} shared={shared} residual={res}: "
          f"max|y - ref| = {err:.2e}, max|ref| = {np.abs(ref).max():.2f}")
    return err


def _dequantize(w, s, b) -> np.ndarray:
    w = np.asarray(w)
    q = (w[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    q = q.reshape(*w.shape[:-1], -1).astype(np.float64)
    g = q.shape[-1] // np.asarray(s).shape[-1]
    return (q * np.repeat(np.asarray(s, np.float64), g, -1)
            + np.repeat(np.asarray(b, np.float64), g, -1))


def _numpy_reference(x, idx, scores, gate_up, down, hidden) -> np.ndarray:
    """float64, nibbles unpacked by hand."""
    wgu, wd = _dequantize(*gate_up), _dequantize(*down)
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
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
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


def emulate_step(B, S, heads, lanes, fresh_rows, seed, gates=True):
    """gated_delta_step: q/k/v/a/b as strided views (columns of wider rows), the pool's
    slots out of order, raw gates (GATES=1) or ready ones."""
    Hk, Hv, D = heads
    rng = np.random.default_rng(seed)
    W = 2 * D + 8                                   # q, k, v rows: [.., 4:4+D] of W
    qw, kw = (rng.standard_normal((B, Hk, W)).astype(np.float32) for _ in range(2))
    vw = rng.standard_normal((B, Hv, W)).astype(np.float32)
    abw = (rng.standard_normal((B, 2 * Hv + 3)) * 2).astype(np.float32)  # a: [:, 1:1+Hv], b after
    a_log = np.log(rng.uniform(1, 16, Hv)).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    pool = (rng.standard_normal((S, Hv, D, D)) * 0.1).astype(np.float32)
    slots = rng.permutation(S)[:B].astype(np.int32)
    fresh = np.array([b in fresh_rows for b in range(B)], np.int32)
    d = WORK
    arrs = {"qw": qw, "kw": kw, "vw": vw, "abw": abw, "alog": a_log, "dtb": dt_bias,
            "pool": pool, "slots": slots, "fresh": fresh}
    for k, v in arrs.items():
        v.tofile(f"{d}/{k}.bin")
    nb = -(-(B * Hv * D * lanes) // 256)
    src = PRE + STEP_PRE + gds._CUDA_HEADER + kfunc(
        "step", gds._CUDA_SOURCE,
        "const float* q, const int* q_shape, const int64_t* q_strides,"
        " const float* k, const int64_t* k_strides, const float* v, const int64_t* v_strides,"
        " const float* g, const int64_t* g_strides, const float* beta,"
        " const int64_t* beta_strides, const float* pool, const int64_t* pool_strides,"
        " const int* slots, const int64_t* slots_strides, const int* fresh,"
        " const int64_t* fresh_strides, const float* a_log, const float* dt_bias, float* y",
        [("OutT", "float"), ("Hk", Hk), ("Hv", Hv), ("Dk", D), ("Dv", D), ("LPR", lanes),
         ("GATES", int(gates))])
    AB = 2 * Hv + 3
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> QW, KW, VW, ABW, ALOG, DTB, POOL, Y; std::vector<int> SL, FR;
int QS[3] = {{{B}, {Hk}, {D}}};
int64_t QKS[3] = {{{Hk * W}, {W}, 1}}, VS[3] = {{{Hv * W}, {W}, 1}}, ABS[2] = {{{AB}, 1}};
int64_t PS[4] = {{{Hv * D * D}, {D * D}, {D}, 1}}, ONE[1] = {{1}};
''' + launch("st", "step(QW.data() + 4, QS, QKS, KW.data() + 4, QKS, VW.data() + 4, VS,"
                   " ABW.data() + 1, ABS, ABW.data() + 1 + " + str(Hv) + ", ABS, POOL.data(), PS,"
                   " SL.data(), ONE, FR.data(), ONE, ALOG.data(), DTB.data(), Y.data())", nb) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  QW = load<float>("{d}/qw.bin", {B * Hk * W}); KW = load<float>("{d}/kw.bin", {B * Hk * W});
  VW = load<float>("{d}/vw.bin", {B * Hv * W}); ABW = load<float>("{d}/abw.bin", {B * AB});
  ALOG = load<float>("{d}/alog.bin", {Hv}); DTB = load<float>("{d}/dtb.bin", {Hv});
  POOL = load<float>("{d}/pool.bin", {S * Hv * D * D}); SL = load<int>("{d}/slots.bin", {B});
  FR = load<int>("{d}/fresh.bin", {B}); Y.assign({B * Hv * D}, -1e30f);
  run_st();
  save("{d}/y.bin", Y); save("{d}/pool2.bin", POOL);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(B, Hv, D)
    got_pool = np.fromfile(f"{d}/pool2.bin", np.float32).reshape(pool.shape)
    # float64 numpy: gates from a, b; state zero where fresh; the delta rule per head
    q, k, v = (w[..., 4:4 + D].astype(np.float64) for w in (qw, kw, vw))
    a, b = abw[:, 1:1 + Hv].astype(np.float64), abw[:, 1 + Hv:1 + 2 * Hv].astype(np.float64)
    if gates:
        g = np.exp(-np.exp(a_log.astype(np.float64)) * np.logaddexp(a + dt_bias, 0.0))
        beta = 1 / (1 + np.exp(-b))
    else:
        g, beta = a, b
    want_pool, want_y = pool.astype(np.float64).copy(), np.zeros((B, Hv, D))
    for r in range(B):
        for h in range(Hv):
            st = pool[slots[r], h].astype(np.float64) * (0.0 if fresh[r] else 1.0)
            kk, qq = k[r, h // (Hv // Hk)], q[r, h // (Hv // Hk)]
            st = st * g[r, h]
            st = st + np.outer((v[r, h] - st @ kk) * beta[r, h], kk)
            want_pool[slots[r], h], want_y[r, h] = st, st @ qq
    err = max(float(np.abs(y - want_y).max()), float(np.abs(got_pool - want_pool).max()))
    print(f"step B={B} S={S} heads={heads} lanes={lanes} gates={gates} "
          f"fresh={sorted(fresh_rows)}: max err {err:.2e}")
    return err


def emulate_add_norm(N, D, seed):
    """add_rms_norm: r a strided view (columns 8..8+D of a wider row); D any width."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D)).astype(np.float32)
    rw = rng.standard_normal((N, D + 16)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    d = WORK
    for k, v in {"x": x, "rw": rw, "w": w}.items():
        v.tofile(f"{d}/{k}.bin")
    src = PRE + kfunc("addnorm", arn._CUDA_SOURCE,
                      "const float* x, const int* x_shape, const int64_t* x_strides,"
                      " const float* r, const int64_t* r_strides, const float* weight,"
                      " const int64_t* weight_strides, const float* eps, float* h, float* y",
                      [("HT", "float"), ("YT", "float")])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> X, RW, W, H, Y, EPS{{1e-6f}};
int XS[2] = {{{N}, {D}}}; int64_t XST[2] = {{{D}, 1}}, RST[2] = {{{D + 16}, 1}}, WST[1] = {{1}};
''' + launch("an", "addnorm(X.data(), XS, XST, RW.data() + 8, RST, W.data(), WST, EPS.data(),"
                   " H.data(), Y.data())", N) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  X = load<float>("{d}/x.bin", {N * D}); RW = load<float>("{d}/rw.bin", {N * (D + 16)});
  W = load<float>("{d}/w.bin", {D}); H.assign({N * D}, -1e30f); Y.assign({N * D}, -1e30f);
  run_an(); save("{d}/h.bin", H); save("{d}/y.bin", Y);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    h = np.fromfile(f"{d}/h.bin", np.float32).reshape(N, D)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, D)
    want_h = x.astype(np.float64) + rw[:, 8:8 + D]
    want_y = want_h / np.sqrt((want_h ** 2).mean(-1, keepdims=True) + 1e-6) * w
    err = max(float(np.abs(h - want_h).max()), float(np.abs(y - want_y).max()))
    print(f"add_rms_norm N={N} D={D}: max err {err:.2e}")
    return err


def emulate_gated_norm(B, T, H, D, seed):
    """gated_rms_norm: z a strided view (heads of columns 8.. of a wider row), y dense."""
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((B, T, H, D)).astype(np.float32)
    W = H * D + 24
    zw = rng.standard_normal((B, T, W)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    d = WORK
    for k, v in {"y": y, "zw": zw, "w": w}.items():
        v.tofile(f"{d}/{k}.bin")
    rows = B * T * H
    src = PRE + kfunc("gnorm", grn._CUDA_SOURCE,
                      "const float* y, const int* y_shape, const int64_t* y_strides,"
                      " const float* z, const int64_t* z_strides, const float* weight,"
                      " const int64_t* weight_strides, const float* eps, float* out",
                      [("OutT", "float")])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> Y, ZW, W, O, EPS{{1e-6f}};
int YS[4] = {{{B}, {T}, {H}, {D}}};
int64_t YST[4] = {{{T * H * D}, {H * D}, {D}, 1}}, ZST[4] = {{{T * W}, {W}, {D}, 1}}, WST[1] = {{1}};
''' + launch("gn", "gnorm(Y.data(), YS, YST, ZW.data() + 8, ZST, W.data(), WST, EPS.data(),"
                   " O.data())", -(-(rows * 32) // 256)) + f'''
int main() {{
  Y = load<float>("{d}/y.bin", {B * T * H * D}); ZW = load<float>("{d}/zw.bin", {B * T * W});
  W = load<float>("{d}/w.bin", {D}); O.assign({rows * D}, -1e30f);
  run_gn();
  FILE* f = fopen("{d}/o.bin", "wb"); fwrite(O.data(), 4, O.size(), f); fclose(f);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    got = np.fromfile(f"{d}/o.bin", np.float32).reshape(B, T, H, D)
    yf = y.astype(np.float64)
    z = zw[..., 8:8 + H * D].reshape(B, T, H, D).astype(np.float64)
    want = yf / np.sqrt((yf * yf).mean(-1, keepdims=True) + 1e-6) * w * z / (1 + np.exp(-z))
    err = float(np.abs(got - want).max())
    print(f"gated_rms_norm B={B} T={T} H={H} D={D}: max err {err:.2e}")
    return err


def emulate_prep(B, heads, rd, R, seed, max_pos=64):
    """attention_prep on the joined projection's views (q with its gate per head), pool
    rows out of order; then the gated pass 2 of the paged attention on random partials.
    Past a few hundred positions one ulp of an inverse frequency (glibc's exp2f here,
    numpy's there, CUDA's on the GPU) moves the angle by ~p * 2**-24 rad."""
    Hq, Hkv, D = heads
    rng = np.random.default_rng(seed)
    W = Hq * 2 * D + 2 * Hkv * D + 16
    joined = rng.standard_normal((B, W)).astype(np.float32)
    qw, kw = ((1 + 0.1 * rng.standard_normal(D)).astype(np.float32) for _ in range(2))
    offsets = rng.integers(0, max_pos, B).astype(np.int32)
    slots = rng.permutation(R)[:B].astype(np.int32)
    kp, vp = (rng.standard_normal((R, Hkv, D)).astype(np.float32) for _ in range(2))
    S = 3
    acc = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    ml = np.stack([rng.standard_normal((B, Hq, S)), rng.uniform(0.5, 2, (B, Hq, S))], -1)
    ml[0, 0, 1, 1] = 0.0                                   # an empty split is skipped
    ml = ml.astype(np.float32)
    d = WORK
    arrs = {"joined": joined, "qw": qw, "kw": kw, "off": offsets, "slots": slots, "kp": kp,
            "vp": vp, "acc": acc, "ml": ml}
    for k, v in arrs.items():
        v.tofile(f"{d}/{k}.bin")
    src = PRE + kfunc(
        "prep", ap._CUDA_SOURCE,
        "const float* q, const int* q_shape, const int64_t* q_strides, const float* k,"
        " const int64_t* k_strides, const float* v, const int64_t* v_strides,"
        " const float* q_norm, const int64_t* q_norm_strides, const float* k_norm,"
        " const int64_t* k_norm_strides, const int* offsets, const int64_t* offsets_strides,"
        " const int* slots, const int64_t* slots_strides, const float* k_pool,"
        " const int64_t* k_pool_strides, const float* v_pool, const int64_t* v_pool_strides,"
        " const float* eps, const float* log2_base, float* q_out",
        [("OutT", "float"), ("PoolT", "float"), ("Hq", Hq), ("Hkv", Hkv), ("D", D),
         ("QH", 2 * D), ("RD", rd)])
    src += "#define NEG_INF (-INFINITY)\n" + kfunc(
        "p2", pas._CUDA_PASS2,
        "const float* part_acc, const float* part_ml, const int* part_ml_shape,"
        " const float* gate, const int64_t* gate_strides, float* out",
        [("OutT", "float"), ("D", D), ("GATED", 1)])
    ko, vo = Hq * 2 * D, Hq * 2 * D + Hkv * D
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> J, QW, KW, KP, VP, QO, ACC, ML, O, EPS{{1e-6f}}, LB{{{np.log2(1e7)}f}};
std::vector<int> OFF, SL;
int QS[2] = {{{B}, {Hq * 2 * D}}}; int64_t QST[2] = {{{W}, 1}}, ONE[1] = {{1}};
int64_t PST[3] = {{{Hkv * D}, {D}, 1}}; int MLS[4] = {{{B}, {Hq}, {S}, 2}};
int64_t GST[3] = {{{W}, {2 * D}, 1}};
''' + launch("pr", f"prep(J.data(), QS, QST, J.data() + {ko}, QST, J.data() + {vo}, QST,"
                   " QW.data(), ONE, KW.data(), ONE, OFF.data(), ONE, SL.data(), ONE,"
                   " KP.data(), PST, VP.data(), PST, EPS.data(), LB.data(), QO.data())",
                   -(-(B * (Hq + 2 * Hkv) * 32) // 256)) \
        + f'''
void run_p2() {{       // pass 2: a block of D threads per (row, head), no barriers
  for (int b = 0; b < {B * Hq}; ++b) for (int t = 0; t < {D}; ++t) {{
    blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}};
    p2(ACC.data(), ML.data(), MLS, J.data() + {D}, GST, O.data()); }}
}}
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  J = load<float>("{d}/joined.bin", {B * W}); QW = load<float>("{d}/qw.bin", {D});
  KW = load<float>("{d}/kw.bin", {D}); OFF = load<int>("{d}/off.bin", {B});
  SL = load<int>("{d}/slots.bin", {B}); KP = load<float>("{d}/kp.bin", {R * Hkv * D});
  VP = load<float>("{d}/vp.bin", {R * Hkv * D}); QO.assign({B * Hq * D}, -1e30f);
  ACC = load<float>("{d}/acc.bin", {B * Hq * S * D}); ML = load<float>("{d}/ml.bin", {B * Hq * S * 2});
  O.assign({B * Hq * D}, -1e30f);
  run_pr(); run_p2();
  save("{d}/qo.bin", QO); save("{d}/kp2.bin", KP); save("{d}/vp2.bin", VP); save("{d}/o.bin", O);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    got_q = np.fromfile(f"{d}/qo.bin", np.float32).reshape(B, Hq, D)
    got_k, got_v = (np.fromfile(f"{d}/{n}.bin", np.float32).reshape(R, Hkv, D)
                    for n in ("kp2", "vp2"))
    got_o = np.fromfile(f"{d}/o.bin", np.float32).reshape(B, Hq, D)
    x = joined.astype(np.float64)
    pos = offsets.astype(np.float64)

    def norm_rope(h, w):
        h = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * w
        half = rd // 2      # the angle as the kernel (and MLX's rope) rounds it, in float32
        inv_freq = np.exp2(-(np.arange(half, dtype=np.float32) / np.float32(half))
                           * np.float32(np.log2(1e7)))
        theta = (pos.astype(np.float32)[:, None, None] * inv_freq).astype(np.float64)
        a, b = h[..., :half], h[..., half:rd]
        return np.concatenate([a * np.cos(theta) - b * np.sin(theta),
                               a * np.sin(theta) + b * np.cos(theta), h[..., rd:]], -1)
    want_q = norm_rope(x[:, :ko].reshape(B, Hq, 2 * D)[..., :D], qw)
    want_k, want_v = kp.astype(np.float64).copy(), vp.astype(np.float64).copy()
    want_k[slots] = norm_rope(x[:, ko:vo].reshape(B, Hkv, D), kw)
    want_v[slots] = x[:, vo:vo + Hkv * D].reshape(B, Hkv, D)
    M = ml[..., 0].max(-1, keepdims=True)
    wgt = np.where(ml[..., 1] > 0, np.exp2(ml[..., 0] - M), 0.0)            # [B, Hq, S]
    num = (wgt[..., None] * acc).sum(2)
    den = (wgt * ml[..., 1]).sum(-1, keepdims=True)
    gate = x[:, :ko].reshape(B, Hq, 2 * D)[..., D:]
    want_o = num / den / (1 + np.exp(-gate))
    err = max(float(np.abs(g - w).max()) for g, w in
              ((got_q, want_q), (got_k, want_k), (got_v, want_v), (got_o, want_o)))
    print(f"attention_prep B={B} heads={heads} rotary={rd} positions < {max_pos} "
          f"(+ gated pass 2): max err {err:.2e}")
    return err


STEP_PRE = r'''
struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
'''

WORK = tempfile.mkdtemp(prefix="cuda_on_cpu_")

if __name__ == "__main__":
    # (N, E, K, D, I, group, pad): every lane busy; fewer chunks than lanes; k = 10
    for case, extra in [((3, 8, 4, 256, 256, 64, 128), {}), ((2, 16, 8, 128, 64, 64, 0), {}),
                        ((1, 8, 8, 1024, 96, 32, 64), {"shared": True}),
                        ((2, 12, 10, 96, 128, 32, 0), {"shared": True, "res": True}),
                        ((2, 8, 4, 256, 128, 64, 0), {"res": True})]:
        assert emulate(*case, seed=1, **extra) < 1e-4
    # (B, slots, (Hk, Hv, Dk, Dv), taps, fresh rows): the real head layout at 2+2+4 heads
    for case in [(3, 5, (2, 4, 128, 128), 4, {1}), (2, 4, (1, 2, 32, 64), 3, set())]:
        assert emulate_conv(*case, seed=2) < 1e-5
    # (B, slots, (Hk, Hv, D), lanes, fresh rows): grouped heads, every lane count
    for case, gates in [((3, 5, (2, 4, 32), 8, {1}), True), ((1, 2, (1, 2, 128), 32, set()), True),
                        ((2, 4, (2, 2, 64), 4, {0}), False)]:
        assert emulate_step(*case, seed=3, gates=gates) < 1e-4
    for N, D in [(1, 2048), (3, 200), (2, 40)]:    # the real width; ragged; fewer than a warp
        assert emulate_add_norm(N, D, seed=4) < 1e-5
    for B, T, H, D in [(1, 1, 32, 128), (2, 3, 4, 96), (3, 1, 3, 40)]:   # the real heads; rows % 8
        assert emulate_gated_norm(B, T, H, D, seed=5) < 1e-5
    for B, heads, rd, R in [(1, (16, 2, 256), 64, 7), (3, (4, 2, 64), 16, 9)]:
        assert emulate_prep(B, heads, rd, R, seed=6) < 1e-5
    assert emulate_prep(2, (16, 2, 256), 64, 7, seed=7, max_pos=5000) < 2e-3
