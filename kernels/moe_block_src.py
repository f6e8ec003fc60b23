"""CUDA and Metal sources of kernels/moe_block.py: moe_experts' two launches with the
routing of kernels/moe_route.py done inside them (the bodies: moe_experts_src's
templates; here the routing function and the hooks that call it).

`route_topk` (kernels/route_topk_src.py) is the warp function moe_route's kernel runs
too, so the experts and weights it picks are bit for bit moe_route's. It reads the
router row through a stride (a column slice of the joined router output)
and runs `rounds` rounds: launch 1 (a warp per token, expert slot j, 4 outputs) needs
only round j's expert; launch 2 (a block per token and 16 output rows) has its warp 0
run all k rounds and leave the token's ids and weights in shared memory (64 bytes at
k = 8 beside the staged s * h: within Metal's 32 KB).

x, the router logits and the row map are read through their strides (the kernels are
built without MLX's row-contiguous copies: a strided logits view would cost a copy
launch). Row map: token n routes by row rows[n] of the logits (ROWS; padding rows
use row 0's experts and weights), else by its own row.
"""
from kernels import route_topk_src
from kernels.moe_experts_src import sources

# The token's router row (the row map's entry with ROWS) and the strided loads of x.
_ROW = "logits + (ROWS ? int64_t(row_map[n * row_map_strides[0]]) : int64_t(n)) * logits_strides[0]"
_X = {"x_row": "x + tok * x_strides[0]", "x_at": "(c * 32 + t) * x_strides[1]",
      "x_chunk": """      if (x_strides[1] == 1) {
        load32(xr + c * 32, xv[it]);
      } else {
#pragma unroll
        for (int t = 0; t < 32; ++t) xv[it][t] = static_cast<float>(xr[(c * 32 + t) * x_strides[1]]);
      }"""}

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
    # launch 1 runs its own token once (moe_experts' DEDUPE needs the ids of every token)
    return {"gate_up": {"expert": _GATE_UP_EXPERT, **_X, "first": "", "next": "  break;"},
            "down": {"route": down_route, "expert": "s_idx[j < K ? j : 0]", "score": "s_w[j]"}}


def block_sources(backend: str, make_sources=sources) -> tuple[str, str, str]:
    """(header, gate_up body, down body) on `backend`, from `make_sources` (moe_experts_src's
    `sources`, or another revision's: kernels/bench/moe_experts_ab.py)."""
    if backend == "cuda":
        return make_sources("cuda", _hooks(_CUDA_DOWN_ROUTE), route_topk_src.CUDA)
    return make_sources("metal", _hooks(_METAL_DOWN_ROUTE), route_topk_src.METAL)


# backend -> (header, gate_up body, down body)
SOURCES = {backend: block_sources(backend) for backend in ("cuda", "metal")}
