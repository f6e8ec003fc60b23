"""``python -m kernels.bench.cuda_on_cpu``: CUDA sources of kernels/ run on the CPU.

kernels/moe_experts.py's two kernels and kernels/gdn_conv_step.py's here; the decode
step's others (gated_delta_step alone and with its output norm, add_rms_norm,
gated_rms_norm, attention_prep and the gated pass 2 of paged_attention) in
kernels/bench/cuda_on_cpu_decode.py, run after them, and a prompt chunk's
(kernels/bench/cuda_on_cpu_chunk.py); then kernels/moe_block.py's at small
shapes (kernels/bench/cuda_on_cpu_route.py; run that module for the real E=256, D=2048,
I=512 too).

Not a benchmark: a check of a CUDA source's index math where no GPU is at hand. The
kernel bodies are compiled by g++ (C++20) as written, with a shim: each block's threads
(256, or as many as `launch` is told) are std::threads, ``__shfl_xor_sync`` and
``__syncthreads`` are barriers, and the blocks run one after another. Inputs are float32 (the bf16 instantiation differs
only in its loads' conversions); the result is compared with a float64 numpy
reference that unpacks the nibbles by hand. ~10 s a case on two cores.
"""
import subprocess
import tempfile

import mlx.core as mx
import numpy as np

import kernels.gdn_conv_step as gcs
import kernels.moe_experts as me
import kernels.moe_experts_src as mes

# Shim pieces for kernels/moe_grouped_src.py (the tensor cores' tf32 MMA and what goes
# with it). TANDEM_SHIM tells a CUDA source to leave out its inline-asm version.
TF32_MMA = r'''
#include <cstring>
#include <cstdlib>
#define TANDEM_SHIM
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
// bf16 storage as a kernel reads it (static_cast<float>): the 16 high bits of a float
struct bf16_t {
  uint16_t bits;
  operator float() const { return __uint_as_float(unsigned(bits) << 16); }
};
// A warp's collective calls alternate between two deposit slots, so one barrier a call
// is enough: a lane writes slot p of call n + 2 only after every lane reached call n + 1,
// that is, after every lane read slot p of call n.
thread_local int g_slot_shfl, g_slot_mma;
unsigned long long g_shfl[2][1024];
template <class T> T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) <= 8, "shfl of a wider type");
  const int p = g_slot_shfl;
  g_slot_shfl ^= 1;
  std::memcpy(&g_shfl[p][g_tid], &v, sizeof(T));
  g_warps[g_tid / 32]->arrive_and_wait();
  T o;
  std::memcpy(&o, &g_shfl[p][(g_tid / 32) * 32 + (src & 31)], sizeof(T));
  return o;
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = A B + C, C the lane's d. Every
// lane deposits its A (a0..a3), B (b0, b1) and C (c0..c3) registers; each then computes
// its own four D registers from the gathered matrices, read by the PTX ISA's fragment
// tables for .m16n8k8 (groupID = lane >> 2, threadID_in_group = lane % 4):
//   A (16 x 8): row = groupID for a0, a2; groupID + 8 for a1, a3;
//               col = threadID_in_group for a0, a1; threadID_in_group + 4 for a2, a3
//   B (8 x 8):  row = threadID_in_group for b0; threadID_in_group + 4 for b1; col = groupID
//   C, D (16 x 8): row = groupID for c0, c1; groupID + 8 for c2, c3;
//               col = threadID_in_group * 2 + (i & 1) for ci
// An A or B register with any of its low 13 bits set is not a tf32 value: the run stops
// there (what the hardware makes of those bits is nothing a kernel may rely on).
// The 8 products (exact: 11 x 11 significant bits) and C are summed in double and rounded
// once to float: one float32 rounding an MMA, as the tensor cores' float32 accumulation
// (whose own order and rounding inside an MMA this does not model).
unsigned g_mma_regs[2][1024][10];
void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
  const int p = g_slot_mma;
  g_slot_mma ^= 1;
  unsigned* mine = g_mma_regs[p][g_tid];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  for (int i = 0; i < 2; ++i) mine[4 + i] = b[i];
  for (int i = 0; i < 4; ++i) mine[6 + i] = __float_as_uint(d[i]);
  for (int i = 0; i < 6; ++i)
    if (mine[i] & 0x1FFFu) {
      std::fprintf(stderr, "mma_tf32: lane %d register %d = %08x is not a tf32 value\n",
                   g_tid % 32, i, mine[i]);
      std::abort();
    }
  g_warps[g_tid / 32]->arrive_and_wait();
  const unsigned (*w)[10] = g_mma_regs[p] + (g_tid / 32) * 32;   // the warp's 32 lanes
  auto A = [&](int row, int col) {
    const int lane = 4 * (row % 8) + col % 4;
    const int reg = (row < 8 ? 0 : 1) + (col < 4 ? 0 : 2);
    return double(__uint_as_float(w[lane][reg]));
  };
  auto B = [&](int row, int col) {
    const int lane = 4 * col + row % 4;
    const int reg = row < 4 ? 0 : 1;
    return double(__uint_as_float(w[lane][4 + reg]));
  };
  auto C = [&](int row, int col) {
    const int lane = 4 * (row % 8) + col / 2;
    const int reg = (row < 8 ? 0 : 2) + (col & 1);
    return double(__uint_as_float(w[lane][6 + reg]));
  };
  const int group = (g_tid % 32) >> 2, tig = g_tid % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = group + (i < 2 ? 0 : 8), col = tig * 2 + (i & 1);
    double s = C(row, col);
    for (int k = 0; k < 8; ++k) s += A(row, k) * B(k, col);
    d[i] = float(s);
  }
}
'''

PRE = r'''
#include <barrier>
#include <cstring>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstddef>
#include <memory>
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct D3 { int x, y, z; };
thread_local D3 blockIdx, threadIdx;
D3 blockDim{256, 1, 1}, gridDim{1, 1, 1};
std::barrier<>* g_block;
std::vector<std::unique_ptr<std::barrier<>>> g_warps;
float g_buf[1024];
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
// kernels/moe_experts_src.py's STAGED copies: at once; a block's dynamic shared memory (the
// blocks run one after another)
alignas(16) unsigned char g_dyn_smem[256 * 1024];
template <class T> T* dyn_smem() { return reinterpret_cast<T*>(g_dyn_smem); }
inline void cp_async16(void* d, const void* s) { std::memcpy(d, s, 16); }
inline void cp_async_commit() {}
template <int PENDING> void cp_async_wait() {}
float __expf(float x) { return std::exp(x); }
float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
''' + TF32_MMA

def kfunc(name, src, args, templates):
    s = f"void {name}({args}) {{\n"
    for k, v in templates:
        s += f"  using {k} = {v};\n" if isinstance(v, str) else f"  constexpr int {k} = {v};\n"
    return s + src + "\n}\n"

def launch(name, call, nblocks, threads=256):
    """run_<name>(): nblocks blocks of `threads` (a multiple of 32, <= 1024) one after another;
    nblocks a list: only the blocks it names, in its order."""
    blocks = list(nblocks) if isinstance(nblocks, (list, tuple, range)) else range(nblocks)
    grid = max(blocks, default=-1) + 1          # a list: the grid up to its last block
    return f'''
void run_{name}() {{
  blockDim = {{{threads}, 1, 1}};
  gridDim = {{{grid}, 1, 1}};
  static const int blocks[] = {{{", ".join(map(str, blocks)) or "-1"}}};
  for (int b : blocks) {{
    if (b < 0) continue;
    std::barrier<> blk({threads}); g_block = &blk;
    g_warps.clear(); for (int w = 0; w < {threads // 32}; ++w) g_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> ts;
    for (int t = 0; t < {threads}; ++t) ts.emplace_back([=]() {{
      blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}}; g_tid = t; {call}; }});
    for (auto& t : ts) t.join();
  }}
}}
'''

def run_cases(emulate, cases, bound: float = 1e-5) -> int:
    """emulate(*case, seed=i, work=folder) for each case (its max error), the worst
    printed against `bound`: 0 when every case is within it, else 1."""
    worst = 0.0
    with tempfile.TemporaryDirectory() as work:
        for i, case in enumerate(cases):
            worst = max(worst, emulate(*case, seed=i, work=work))
    print(f"worst {worst:.2e}: {'ok' if worst < bound else 'WRONG'}")
    return 0 if worst < bound else 1


def build_and_run(src: str, work: str) -> None:
    """Write src to work/emu.cpp, compile it with g++ and run it there."""
    with open(f"{work}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{work}/emu.cpp", "-o",
                    f"{work}/emu"], check=True)
    subprocess.run([f"{work}/emu"], check=True)


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
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, D)
    if out is not None:
        out.append(y)
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
    print(f"N={N} E={E} K={K} D={D} I={I} GS={GS} pad={pad} shared={shared} residual={res} "
          f"sgc={sgc} dedupe={dedupe} tile_major={tile_major} staged={staged}/{staged_down} "
          f"({N * K - len(set(idx.ravel().tolist()))} repeats): "
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


WORK = tempfile.mkdtemp(prefix="cuda_on_cpu_")

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
