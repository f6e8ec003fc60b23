"""CUDA and Metal sources of kernels/moe_block.py: moe_experts' two launches with the
routing of kernels/moe_route.py done inside them (the bodies: moe_experts_src's
templates; here the routing function and the hooks that call it).

`route_topk` is moe_route's kernel body as a warp function, statement for statement
(the same loads to float, max, exp, sum and arg-max rounds, in the same order; ties to
the lower expert id), so the experts and weights it picks are bit for bit moe_route's.
It reads the router row through a stride (a column slice of the joined router output)
and runs `rounds` rounds: launch 1 (a warp per token, expert slot j, 4 outputs) needs
only round j's expert; launch 2 (a block per token and 16 output rows) has its warp 0
run all k rounds and leave the token's ids and weights in shared memory (64 bytes at
k = 8 beside the staged s * h: within Metal's 32 KB).

x, the router logits and the row map are read through their strides (the kernels are
built without MLX's row-contiguous copies: a strided logits view would cost a copy
launch). Row map: token n routes by row rows[n] of the logits (ROWS; padding rows
use row 0's experts and weights), else by its own row.
"""
from kernels.moe_experts_src import sources

_CUDA_ROUTE = """
#ifndef NEG_INF
#define NEG_INF (-__int_as_float(0x7f800000))
#endif
// kernels/moe_route.py's body for one router row x (experts E apart by `stride`), run by
// a whole warp: lane holds experts i * 32 + lane. After `rounds` rounds, lane kk < rounds
// holds round kk's expert and probability (my_i, my_w); every lane the picked
// probabilities' sum, the softmax's sum and (returned) the last round's expert.
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
"""

_METAL_ROUTE = """
// kernels/moe_route.py's body for one router row x (see the CUDA source): P is a device
// or constant pointer as MLX declares the input.
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
"""

# The token's router row (the row map's entry with ROWS) and the strided loads of x.
_ROW = "logits + (ROWS ? int64_t(row_map[n * row_map_strides[0]]) : int64_t(n)) * logits_strides[0]"
_X = {"x_row": "x + n * x_strides[0]", "x_at": "(c * 32 + t) * x_strides[1]"}

# Launch 1: the warp's expert is round j of its token's top-k (every lane gets it; the
# shared expert's warps, j == K, route nothing: `own` is the same across the warp).
_GATE_UP_EXPERT = f"""  int r_i;                                    // unused: launch 2 weighs
  float r_w, r_picked, r_sum;
  const size_t e = own ? 0 : static_cast<size_t>(
      route_topk<E>({_ROW}, logits_strides[1], j + 1, lane, r_i, r_w, r_picked, r_sum));"""

_CUDA_DOWN_ROUTE = f"""  __shared__ int s_idx[K];                    // the token's top-k ids and weights
  __shared__ float s_w[K];
  if (threadIdx.x < 32) {{                     // warp 0 routes for the block
    int my_i;
    float my_w, picked, sum;
    route_topk<E>({_ROW}, logits_strides[1], K, lane, my_i, my_w, picked, sum);
    if (lane < K) {{
      const float denom = NORM ? picked : sum;
      s_idx[lane] = my_i;
      s_w[lane] = my_w / denom;
    }}
  }}
  __syncthreads();"""

_METAL_DOWN_ROUTE = f"""  threadgroup int s_idx[K];
  threadgroup float s_w[K];
  if (tid < 32) {{
    int my_i;
    float my_w, picked, sum;
    route_topk<E>({_ROW}, logits_strides[1], K, lane, my_i, my_w, picked, sum);
    if (lane < K) {{
      const float denom = NORM ? picked : sum;
      s_idx[lane] = my_i;
      s_w[lane] = my_w / denom;
    }}
  }}
  threadgroup_barrier(mem_flags::mem_threadgroup);"""


def _hooks(down_route: str) -> dict:
    # j == K: the shared expert's chunks (their id is not read; s_idx has k entries)
    return {"gate_up": {"expert": _GATE_UP_EXPERT, **_X},
            "down": {"route": down_route, "expert": "s_idx[j < K ? j : 0]", "score": "s_w[j]"}}


# backend -> (header, gate_up body, down body)
SOURCES = {"cuda": sources("cuda", _hooks(_CUDA_DOWN_ROUTE), _CUDA_ROUTE),
           "metal": sources("metal", _hooks(_METAL_DOWN_ROUTE), _METAL_ROUTE)}
