"""MoE router: softmax over E experts, top-k, optional renormalisation, in one kernel.

logits [N, E] (any float dtype) -> (indices [N, k] int32, weights [N, k] float32),
each row sorted by descending probability; ties go to the lower expert id.
With normalize (Qwen's norm_topk_prob) the k weights sum to 1; without, they
are the full-softmax probabilities of the chosen experts.
"""
from __future__ import annotations

import mlx.core as mx

from kernels import route_topk_src
from kernels.kernel_build import KernelBuild

NAME = "moe_route"

# One warp per token row: kernels/route_topk_src.py's warp function, all k rounds; lane
# kk < k writes round kk's expert and weight. The row and its experts through the strides.
_CUDA_SOURCE = """
  const int N = logits_shape[0];
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;                       // whole warps: blockDim is a multiple of 32
  int my_i;
  float my_w, picked, sum;
  route_topk<E>(logits + int64_t(row) * logits_strides[0], logits_strides[1], K, lane, my_i,
                my_w, picked, sum);
  if (lane < K) {
    const float denom = NORM ? picked : sum;
    indices[size_t(row) * K + lane] = my_i;
    weights[size_t(row) * K + lane] = my_w / denom;
  }
"""

_METAL_SOURCE = """
  const int N = logits_shape[0];
  const int row = int(thread_position_in_grid.x) / 32;
  const int lane = int(thread_index_in_simdgroup);
  if (row >= N) return;
  int my_i;
  float my_w, picked, sum;
  route_topk<E>(logits + int64_t(row) * logits_strides[0], logits_strides[1], K, lane, my_i,
                my_w, picked, sum);
  if (lane < K) {
    const float denom = NORM ? picked : sum;
    indices[size_t(row) * K + lane] = my_i;
    weights[size_t(row) * K + lane] = my_w / denom;
  }
"""

# logits read through their strides: the model hands over a column slice of the joined
# router output, and a row-contiguous kernel cost MLX's copy of it, one launch a layer
# (40 `copy_g_nd` a B=16 step on the H200, session 17's kernel_time)
_KERNEL = KernelBuild(NAME, "tandem_moe_route", ["logits"], ["indices", "weights"],
                      _CUDA_SOURCE, _METAL_SOURCE, cuda_header=route_topk_src.CUDA,
                      metal_header=route_topk_src.METAL, row_contiguous=False)


def _get(backend: str):
    return _KERNEL.get(backend)


def reference(logits, k: int, normalize: bool = True):
    """Plain-mx float32: full softmax, stable sort by descending probability, take k."""
    probs = mx.softmax(logits.astype(mx.float32), axis=-1)              # [N, E]
    order = mx.argsort(-probs, axis=-1)[:, :k].astype(mx.int32)         # [N, k]
    weights = mx.take_along_axis(probs, order, axis=-1)                 # [N, k]
    if normalize:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return order, weights


def applies(logits, k: int) -> bool:
    return logits.ndim == 2 and applies_to(logits.shape[-1], k)


def applies_to(E: int, k: int) -> bool:
    """applies() for E experts' logits."""
    return E % 32 == 0 and E <= 1024 and 1 <= k <= min(32, E)


def kernel(logits, k: int, normalize: bool = True, *, backend: str):
    """Launch on `backend`. Same returns as `reference`."""
    N, E = logits.shape
    return _get(backend)(
        inputs=[logits], template=[("E", E), ("K", k), ("NORM", bool(normalize))],
        grid=(N * 32, 1, 1), threadgroup=(128, 1, 1),
        output_shapes=[(N, k), (N, k)], output_dtypes=[mx.int32, mx.float32])
