"""The MoE router's top-k as a warp function, CUDA and Metal: softmax over E experts and
k rounds of a warp arg-max, for one router row read through a stride.

Shared by kernels/moe_route.py (one warp per token, all k rounds) and kernels/moe_block.py
(the routing inside the experts' launches: round j alone, or all k in one warp), so the
experts and weights both pick are the same computation, bit for bit: the same loads to
float, max, exp, sum and arg-max rounds, in the same order; ties to the lower expert id.
Lane l holds experts i * 32 + l (coalesced loads). After `rounds` rounds, lane kk <
rounds holds round kk's expert and probability (my_i, my_w); every lane the picked
probabilities' sum and the softmax's sum; the return value is the last round's expert.
Guarded, so that a program holding both kernels' headers (kernels/bench/cuda_on_cpu_route.py)
defines it once.
"""

CUDA = """
#ifndef TANDEM_ROUTE_TOPK
#define TANDEM_ROUTE_TOPK
#ifndef NEG_INF
#define NEG_INF (-__int_as_float(0x7f800000))
#endif
// The router's top-k for one row x (experts E apart by `stride`), run by a whole warp
// (kernels/route_topk_src.py).
template <int E, typename P>
__device__ __forceinline__ int route_topk(P x, const int64_t stride, const int rounds,
                                          const int lane, int& my_i, float& my_w,
                                          float& picked, float& sum) {
  constexpr int EPL = E / 32;
  float p[EPL];
  float mx_ = NEG_INF;
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    p[i] = static_cast<float>(x[(i * 32 + lane) * stride]);
    mx_ = fmaxf(mx_, p[i]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx_ = fmaxf(mx_, __shfl_xor_sync(0xffffffffu, mx_, off));
  sum = 0.f;
#pragma unroll
  for (int i = 0; i < EPL; ++i) { p[i] = __expf(p[i] - mx_); sum += p[i]; }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  unsigned taken = 0u;                         // bit i: expert i*32+lane already chosen
  my_w = 0.f;
  picked = 0.f;
  my_i = 0;
  int bi = 0;
  for (int kk = 0; kk < rounds; ++kk) {
    float bv = -1.f;
    bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      if (!(taken >> i & 1u) && p[i] > bv) { bv = p[i]; bi = i * 32 + lane; }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    if (lane == kk) { my_w = bv; my_i = bi; }
    picked += bv;
  }
  return bi;
}
#endif
"""

METAL = """
#ifndef TANDEM_ROUTE_TOPK
#define TANDEM_ROUTE_TOPK
// The router's top-k for one row x (see the CUDA source): P is a device or constant
// pointer as MLX declares the input.
template <int E, typename P>
inline int route_topk(P x, const int64_t stride, const int rounds, const int lane,
                      thread int& my_i, thread float& my_w, thread float& picked,
                      thread float& sum) {
  constexpr int EPL = E / 32;
  float p[EPL];
  float mx_ = -INFINITY;
  for (int i = 0; i < EPL; ++i) {
    p[i] = static_cast<float>(x[(i * 32 + lane) * stride]);
    mx_ = fmax(mx_, p[i]);
  }
  mx_ = simd_max(mx_);
  sum = 0.0f;
  for (int i = 0; i < EPL; ++i) { p[i] = metal::exp(p[i] - mx_); sum += p[i]; }
  sum = simd_sum(sum);
  uint taken = 0u;
  my_w = 0.0f;
  picked = 0.0f;
  my_i = 0;
  int bi = 0;
  for (int kk = 0; kk < rounds; ++kk) {
    float bv = -1.0f;
    bi = 0x7fffffff;
    for (int i = 0; i < EPL; ++i) {
      if (!((taken >> i) & 1u) && p[i] > bv) { bv = p[i]; bi = i * 32 + lane; }
    }
    for (ushort off = 16; off > 0; off >>= 1) {
      const float ov = simd_shuffle_xor(bv, off);
      const int oi = simd_shuffle_xor(bi, off);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (bi % 32 == lane) taken |= 1u << (bi / 32);
    if (lane == kk) { my_w = bv; my_i = bi; }
    picked += bv;
  }
  return bi;
}
#endif
"""
