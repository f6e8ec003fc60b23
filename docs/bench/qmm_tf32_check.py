"""Does MLX's CUDA quantized matmul round float32 inputs to TF32? (a GPU queue job)

tests/engine/test_fused_projections.py's quantized cases failed on an H100 (session 41):
joined and separate projections of a tiny float32 model differed beyond float32 rounding.
A reading of MLX 0.32's CUDA dispatch (mlx/backend/cuda/quantized/quantized.cpp): with
more than one row, a layer whose K fits in one quantization group (a tiny model's K=64,
group 64) goes to qmm_sm90 on sm_90, a CUTLASS GEMM whose float32 MMA is TF32, and one of
N % 128 == 0 and 8+ rows to qmm_sm80; fewer rows, or other shapes, go to qmv (float32
FMAs). MLX_ENABLE_TF32=0 (tests/conftest.py) reaches cuBLAS, not these kernels. This
prints each shape's largest error against a float64 product of the dequantized weights,
in units of the bound each arithmetic allows (|x| @ |w| times 2**-24 K for float32,
2**-11 for TF32 inputs): "float32" if within the first, "TF32-class" if only the second;
or the error a shape raised (a CUTLASS instance NVRTC cannot build would fail the test
too). Also the 8-bit router shapes (N=8, and the shared gate's N=1) the MoE model joins.
Run: PYTHONPATH=. python3 docs/bench/qmm_tf32_check.py
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

SHAPES = [  # (rows M, K, N, group size): the tiny tests' layers, then a full-size one
    (1, 64, 4, 64), (7, 64, 4, 64), (7, 64, 8, 64), (7, 64, 128, 64), (7, 64, 256, 64),
    (8, 64, 128, 64), (7, 128, 128, 64), (8, 128, 128, 64), (16, 2048, 2048, 64),
]
SHAPES_8BIT = [(7, 64, 8, 64), (7, 64, 1, 64), (7, 64, 128, 64)]


def worst(device, m: int, k: int, n: int, gs: int, bits: int = 4) -> tuple[float, float]:
    """(largest |error| / (2**-24 K |x|@|w|), the same over 2**-11 |x|@|w|)."""
    key = mx.random.key(m * 1000003 + k * 1009 + n)
    kx, kw = mx.random.split(key)
    x = mx.random.normal((m, k), key=kx)
    w = mx.random.normal((n, k), key=kw)
    with mx.stream(device):
        wq, s, b = mx.quantize(w, group_size=gs, bits=bits)
        y = mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=gs, bits=bits)
        wd = mx.dequantize(wq, s, b, group_size=gs, bits=bits)
        mx.eval(y, wd)
    x64, w64 = np.array(x, np.float64), np.array(wd, np.float64)
    err = np.abs(np.array(y, np.float64) - x64 @ w64.T)
    scale = np.abs(x64) @ np.abs(w64).T + 1e-30
    return float((err / (scale * k * 2.0 ** -24)).max()), float((err / (scale * 2.0 ** -11)).max())


def main() -> None:
    devices = [("cpu", mx.cpu)] + ([("gpu", mx.gpu)] if mx.is_available(mx.gpu) else [])
    print(f"mlx {mx.__version__}; units: float32's bound (<= 1: float32) and TF32's")
    for (m, k, n, gs), bits in [(s, 4) for s in SHAPES] + [(s, 8) for s in SHAPES_8BIT]:
        for name, device in devices:
            try:
                f32, tf32 = worst(device, m, k, n, gs, bits)
            except Exception as e:     # a kernel MLX cannot compile here is an answer too
                print(f"M={m:<3} K={k:<5} N={n:<5} gs={gs} {bits}-bit {name}: raised {type(e).__name__}: "
                      f"{str(e)[:300]}")
                continue
            kind = "float32" if f32 <= 1 else ("TF32-class" if tf32 <= 1 else "worse than TF32")
            print(f"M={m:<3} K={k:<5} N={n:<5} gs={gs} {bits}-bit {name}: {f32:9.3f} x float32, "
                  f"{tf32:7.4f} x TF32 -> {kind}")


if __name__ == "__main__":
    main()
