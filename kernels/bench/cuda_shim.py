"""The shim that runs kernels/'s CUDA sources on the CPU (the kernels.bench.cuda_on_cpu*
checks): C++ stand-ins for CUDA's types and intrinsics (PRE, with the tensor cores' tf32
MMA: TF32_MMA), a kernel body wrapped as a C++ function (kfunc) and launched block by
block, each block's threads as std::threads (launch), and g++ to build and run it
(build_and_run, run_cases). Each block's threads meet at ``__syncthreads`` and a warp's at
its shuffles through std::barrier; the blocks run one after another.
"""
import subprocess
import tempfile

import numpy as np

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


def dequantize(w, s, b) -> np.ndarray:
    """MLX's 4-bit affine quantization undone in float64, the nibbles unpacked by hand."""
    w = np.asarray(w)
    q = (w[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    q = q.reshape(*w.shape[:-1], -1).astype(np.float64)
    g = q.shape[-1] // np.asarray(s).shape[-1]
    return (q * np.repeat(np.asarray(s, np.float64), g, -1)
            + np.repeat(np.asarray(b, np.float64), g, -1))


# A scratch folder for the checks that build in one place (the others take a folder each).
WORK = tempfile.mkdtemp(prefix="cuda_on_cpu_")
