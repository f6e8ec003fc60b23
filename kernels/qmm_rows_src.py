"""CUDA source of kernels/qmm_rows.py (see there for the contract and the layout).

The header's two helpers are the only places that name CUDA's bf16 and tensor-core
instructions; kernels/bench/cuda_on_cpu_qmm.py swaps in CPU versions of exactly these
two and runs the body as written.
"""

CUDA_HEADER = """
// Two floats rounded to bf16 (round to nearest even), packed low-first: the register
// layout of a bf16x2 mma operand.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// D = A B + D for one warp: A 16x16 bf16 (4 regs), B 16x8 bf16 (2 regs), D 16x8 f32.
__device__ __forceinline__ void mma_16816(float* d, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"""

# Template constants: MT 16-row tiles of x (M <= 16 MT), NT 8-column tiles of the output
# a warp, BITS 4 or 8, GS the quantization group, KSPLIT warps a block splitting K (128
# weights each turn). A lane (r = lane / 4, q = lane % 4) holds, for a 128-wide block of
# K, weight row r's 32 weights from 32 q (BITS words: one 16-byte load at 4 bits, two at
# 8) and x rows r and r + 8's 32 values at the same columns. The mma's k index is
# permuted so that these line up: at step j its k 2q, 2q+1, 2q+8, 2q+9 are K's 32 q + 4 j
# + 0..3, in A and B alike (a sum over k does not depend on its order).
CUDA_SOURCE = """
  constexpr int ROWS = 8 * NT;                  // output columns a block
  constexpr int ACC = MT * NT * 4;              // accumulators a lane
  __shared__ float red[KSPLIT * ACC * 32];
  const int M = x_shape[0];
  const int K = x_shape[1];
  const int N = w_shape[0];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int q = lane % 4;
  const int r = lane / 4;
  const int nb = blockIdx.x * ROWS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  const int wpr = K * BITS / 32;                // uint32 words a weight row
  const int gpr = K / GS;                       // groups a row
  float c[MT][NT][4];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int u = 0; u < NT; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[t][u][i] = 0.f;
  for (int kb = warp; kb < K / 128; kb += KSPLIT) {
    const int k0 = kb * 128 + 32 * q;
    unsigned xa[MT][2][16];                     // x rows r and r + 8 of tile t, as bf16 pairs
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * t + r + 8 * h;
        const uint4* src = reinterpret_cast<const uint4*>(x + size_t(row) * K + k0);
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const uint4 p = row < M ? src[v] : make_uint4(0u, 0u, 0u, 0u);
          xa[t][h][4 * v] = p.x;
          xa[t][h][4 * v + 1] = p.y;
          xa[t][h][4 * v + 2] = p.z;
          xa[t][h][4 * v + 3] = p.w;
        }
      }
#pragma unroll
    for (int u = 0; u < NT; ++u) {
      const size_t n = size_t(nb + 8 * u + r);
      const uint4* wsrc = reinterpret_cast<const uint4*>(w + n * wpr) + k0 * BITS / 128;
      unsigned ws[BITS];                        // the lane's 32 weights: BITS words
#pragma unroll
      for (int v = 0; v < BITS / 4; ++v) {
        const uint4 p = wsrc[v];
        ws[4 * v] = p.x;
        ws[4 * v + 1] = p.y;
        ws[4 * v + 2] = p.z;
        ws[4 * v + 3] = p.w;
      }
      const float s = static_cast<float>(scales[n * gpr + k0 / GS]);
      const float b = static_cast<float>(biases[n * gpr + k0 / GS]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {             // step j: the lane's weights 4j .. 4j+3
        const unsigned v = ws[j * BITS / 8] >> ((4 * BITS * j) % 32);
        unsigned bf[2];
        bf[0] = pack_bf16x2(fmaf(float(v & MASK), s, b), fmaf(float((v >> BITS) & MASK), s, b));
        bf[1] = pack_bf16x2(fmaf(float((v >> (2 * BITS)) & MASK), s, b),
                            fmaf(float((v >> (3 * BITS)) & MASK), s, b));
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const unsigned a[4] = {xa[t][0][2 * j], xa[t][1][2 * j], xa[t][0][2 * j + 1],
                                 xa[t][1][2 * j + 1]};
          mma_16816(c[t][u], a, bf);
        }
      }
    }
  }
  // The KSPLIT warps' partial sums, added in a fixed order (deterministic).
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int u = 0; u < NT; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[(warp * ACC + (t * NT + u) * 4 + i) * 32 + lane] = c[t][u][i];
  __syncthreads();
  for (int e = threadIdx.x; e < ACC * 32; e += blockDim.x) {
    float sum = 0.f;
    for (int wp = 0; wp < KSPLIT; ++wp) sum += red[wp * ACC * 32 + e];
    const int l = e % 32;                       // the lane that held it
    const int i = (e / 32) % 4;
    const int u = (e / 128) % NT;
    const int t = e / (128 * NT);
    const int row = 16 * t + l / 4 + 8 * (i / 2);
    const int col = nb + 8 * u + 2 * (l % 4) + i % 2;
    if (row < M) y[size_t(row) * N + col] = static_cast<OT>(sum);
  }
"""
