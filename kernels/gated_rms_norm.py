"""Gated DeltaNet's output norm: RMSNorm per head, gated by SiLU(z), in one launch.

Per head row (b, t, h) of y, z [B, T, H, D] (weight w [D]), in float32:

    out = y * rsqrt(mean(y^2) + eps) * w * z * sigmoid(z)        # cast to y's dtype

The model's plain path (engine/models/gated_deltanet.GatedRMSNorm) is an
mx.fast.rms_norm and a compiled gate: two launches a layer, here one. y and z are read
through their strides (z is a view of the joined input projection); out is dense.

One warp (simdgroup) per head row; the row's sum of squares is one warp sum.
"""
from __future__ import annotations

import mlx.core as mx

from kernels.kernel_build import KernelBuild, scalar

NAME = "gated_rms_norm"
ROWS_PER_BLOCK = 4

_CUDA_SOURCE = """
  const int T = y_shape[1], H = y_shape[2], D = y_shape[3];
  const int rows = y_shape[0] * T * H;
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;                     // whole warps
  const int h = row % H, t = (row / H) % T, b = row / (H * T);
  const auto* yr = y + b * y_strides[0] + t * y_strides[1] + h * y_strides[2];
  const auto* zr = z + b * z_strides[0] + t * z_strides[1] + h * z_strides[2];
  float ss = 0.f;
  for (int i = lane; i < D; i += 32) {
    const float v = static_cast<float>(yr[i * y_strides[3]]);
    ss += v * v;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float inv = rsqrtf(ss / D + eps[0]);
  auto* o = out + size_t(row) * D;
  for (int i = lane; i < D; i += 32) {
    const float zi = static_cast<float>(zr[i * z_strides[3]]);
    const float n = static_cast<float>(yr[i * y_strides[3]]) * inv
                    * static_cast<float>(weight[i * weight_strides[0]]);
    o[i] = static_cast<OutT>(n * zi / (1.f + __expf(-zi)));
  }
"""

# Same layout for Metal; it cannot run on the Linux machines: the self-test guards it.
_METAL_SOURCE = """
  const int T = y_shape[1], H = y_shape[2], D = y_shape[3];
  const int rows = y_shape[0] * T * H;
  const int row = int(thread_position_in_grid.x) / 32;
  const int lane = int(thread_index_in_simdgroup);
  if (row >= rows) return;
  const int h = row % H, t = (row / H) % T, b = row / (H * T);
  auto yr = y + b * y_strides[0] + t * y_strides[1] + h * y_strides[2];
  auto zr = z + b * z_strides[0] + t * z_strides[1] + h * z_strides[2];
  float ss = 0.0f;
  for (int i = lane; i < D; i += 32) {
    const float v = static_cast<float>(yr[i * y_strides[3]]);
    ss += v * v;
  }
  ss = simd_sum(ss);
  const float inv = metal::rsqrt(ss / D + eps[0]);
  device OutT* o = out + size_t(row) * D;
  for (int i = lane; i < D; i += 32) {
    const float zi = static_cast<float>(zr[i * z_strides[3]]);
    const float n = static_cast<float>(yr[i * y_strides[3]]) * inv
                    * static_cast<float>(weight[i * weight_strides[0]]);
    o[i] = static_cast<OutT>(n * zi / (1.0f + metal::exp(-zi)));
  }
"""

_INPUTS = ["y", "z", "weight", "eps"]
_OUTPUTS = ["out"]
_KERNEL = KernelBuild(NAME, "tandem_gated_rms_norm", _INPUTS, _OUTPUTS, _CUDA_SOURCE, _METAL_SOURCE,
                      row_contiguous=False)


def _get(backend: str):
    return _KERNEL.get(backend)


def reference(y, z, weight, eps: float):
    """Plain-mx float32: rms_norm(y) * weight * silu(z) per head row, in y's dtype."""
    yf, zf = y.astype(mx.float32), z.astype(mx.float32)
    n = yf * mx.rsqrt(mx.mean(yf * yf, axis=-1, keepdims=True) + eps)
    return (n * weight.astype(mx.float32) * zf * mx.sigmoid(zf)).astype(y.dtype)


def applies(y, z, weight) -> bool:
    return (y.ndim == 4 and z.shape == y.shape and weight.shape == (y.shape[-1],)
            and all(mx.issubdtype(a.dtype, mx.floating) for a in (y, z, weight)))


def kernel(y, z, weight, eps: float, *, backend: str):
    """Launch on `backend`: out [B, T, H, D] in y.dtype, as `reference`."""
    rows = y.shape[0] * y.shape[1] * y.shape[2]
    (out,) = _get(backend)(
        inputs=[y, z, weight, scalar(float(eps))], template=[("OutT", y.dtype)],
        grid=(rows * 32, 1, 1), threadgroup=(32 * ROWS_PER_BLOCK, 1, 1),
        output_shapes=[y.shape], output_dtypes=[y.dtype])
    return out
