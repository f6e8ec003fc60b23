"""The residual add and the RMSNorm after it, in one launch.

Per row n of x, r [N, D] (weight w [D]):

    h[n] = x[n] + r[n]                                      # in x's dtype, as `x + r` rounds it
    y[n] = h[n] * rsqrt(mean(h[n]^2) + eps) * w             # float32 math, from the rounded h

A decoder layer adds its mixer's output to the residual stream and normalises the sum
for its MLP: the plain path is an add and an mx.fast.rms_norm, two launches a layer
(40 a step of the Qwen3.5 hybrid). Both outputs are new arrays (h is the residual the
MLP block adds back). x, r and w are read through their strides: no copies.

One block of 256 threads per row; a thread keeps no row in registers (it re-reads its
own h elements from the output it wrote), so any D works.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild, scalar

NAME = "add_rms_norm"
THREADS = 256          # a block per row

_CUDA_SOURCE = """
  const int D = x_shape[1];
  const int n = blockIdx.x;
  const int tid = threadIdx.x;
  __shared__ float part[32];
  const auto* xr = x + n * x_strides[0];
  const auto* rr = r + n * r_strides[0];
  HT* hr = h + size_t(n) * D;
  float ss = 0.f;
  for (int i = tid; i < D; i += blockDim.x) {
    const HT hv = static_cast<HT>(static_cast<float>(xr[i * x_strides[1]])
                                  + static_cast<float>(rr[i * r_strides[1]]));
    hr[i] = hv;
    const float f = static_cast<float>(hv);
    ss += f * f;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (tid % 32 == 0) part[tid / 32] = ss;
  __syncthreads();
  if (tid < 32) {
    float t = tid < (blockDim.x + 31) / 32 ? part[tid] : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (tid == 0) part[0] = t;
  }
  __syncthreads();
  const float inv = rsqrtf(part[0] / D + eps[0]);
  YT* yr = y + size_t(n) * D;
  for (int i = tid; i < D; i += blockDim.x) {
    yr[i] = static_cast<YT>(static_cast<float>(hr[i]) * inv
                            * static_cast<float>(weight[i * weight_strides[0]]));
  }
"""

# Same layout for Metal (simdgroups of 32); it cannot run on the Linux machines: the
# self-test guards it at engine start.
_METAL_SOURCE = """
  const int D = x_shape[1];
  const int n = int(threadgroup_position_in_grid.x);
  const int tid = int(thread_position_in_threadgroup.x);
  const int nt = int(threads_per_threadgroup.x);
  threadgroup float part[32];
  auto xr = x + n * x_strides[0];
  auto rr = r + n * r_strides[0];
  device HT* hr = h + size_t(n) * D;
  float ss = 0.0f;
  for (int i = tid; i < D; i += nt) {
    const HT hv = static_cast<HT>(static_cast<float>(xr[i * x_strides[1]])
                                  + static_cast<float>(rr[i * r_strides[1]]));
    hr[i] = hv;
    const float f = static_cast<float>(hv);
    ss += f * f;
  }
  ss = simd_sum(ss);
  if (int(thread_index_in_simdgroup) == 0) part[tid / 32] = ss;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid < 32) {
    float t = tid < (nt + 31) / 32 ? part[tid] : 0.0f;
    t = simd_sum(t);
    if (tid == 0) part[0] = t;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
  const float inv = metal::rsqrt(part[0] / D + eps[0]);
  device YT* yr = y + size_t(n) * D;
  for (int i = tid; i < D; i += nt) {
    yr[i] = static_cast<YT>(static_cast<float>(hr[i]) * inv
                            * static_cast<float>(weight[i * weight_strides[0]]));
  }
"""

_INPUTS = ["x", "r", "weight", "eps"]
_OUTPUTS = ["h", "y"]
_KERNEL = KernelBuild(NAME, "tandem_add_rms_norm", _INPUTS, _OUTPUTS, _CUDA_SOURCE, _METAL_SOURCE,
                      row_contiguous=False)


def _get(backend: str):
    return _KERNEL.get(backend)


def out_dtype(x: mx.array, weight: mx.array) -> mx.Dtype:
    """y's dtype: x's promoted with the weight's, as mx.fast.rms_norm returns it."""
    return mx.result_type(x.dtype, weight.dtype)


def reference(x, r, weight, eps: float):
    """Plain-mx float32: (h = x + r in x's dtype, rms_norm(h) * weight in out_dtype)."""
    h = (x.astype(mx.float32) + r.astype(mx.float32)).astype(x.dtype)
    hf = h.astype(mx.float32)
    inv = mx.rsqrt(mx.mean(hf * hf, axis=-1, keepdims=True) + eps)
    return h, (hf * inv * weight.astype(mx.float32)).astype(out_dtype(x, weight))


def applies(x, r, weight) -> bool:
    return (x.ndim == 2 and r.shape == x.shape and weight.shape == (x.shape[1],)
            and all(mx.issubdtype(a.dtype, mx.floating) for a in (x, r, weight)))


def kernel(x, r, weight, eps: float, *, backend: str):
    """Launch on `backend`: (h [N, D] in x.dtype, y [N, D] in out_dtype) as `reference`."""
    N, D = x.shape
    return _get(backend)(
        inputs=[x, r, weight, scalar(float(eps))],
        template=[("HT", x.dtype), ("YT", out_dtype(x, weight))],
        grid=(N * THREADS, 1, 1), threadgroup=(THREADS, 1, 1),
        output_shapes=[(N, D), (N, D)], output_dtypes=[x.dtype, out_dtype(x, weight)])
