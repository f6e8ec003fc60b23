"""Dense weights for the quantized layers MLX's CUDA backend gets wrong.

On the H200 with MLX 0.32.4's CUDA backend (h200 sessions 9 and 10,
docs/bench/h200-session9-diag_qmm.py), ``mx.quantized_matmul(x, w, scales, biases,
transpose=True, group_size=g, bits=4)`` with K (the input width) equal to the group
size, i.e. one quantization group along K, and more than one input row returns garbage
(max |d| ~3e38 against the CPU, float32 and bfloat16, M=4 or B=4 at K=64/group 64 and
K=128/group 128); K=64 with group 32, K=128 with group 64 and one row are right. The
suspect is MLX's Hopper CUTLASS path (``supports_qmm_sm90``, mlx/backend/cuda/quantized).

No shape of the real models takes it (their K are 512..2048 with group 64): it only
matters for tiny models (hidden 64 with group 64: test models, toy checkpoints). So,
on the CUDA backend only, each such layer becomes its dequantized dense twin in the
dtype of its scales: the same numbers, a little more memory on a tiny layer. Metal and
the CPU are untouched. tests/kernels/test_mlx_cuda_qmm_one_group.py fails (a strict
xfail) once MLX is fixed: then drop this module.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from engine.loading.cpu_dense import dense_twin, replace_modules
from kernels.backend import gpu_backend


def needs_guard() -> bool:
    """True where the bug bites: MLX's CUDA backend with the GPU the default device."""
    return gpu_backend() == "cuda"


def _input_dims(m: nn.Module) -> int:
    """K of a quantized layer: its packed [out, K * bits / 32] uint32 weight's width."""
    return m.weight.shape[-1] * 32 // m.bits


def _one_group(m: nn.Module) -> bool:
    """A QuantizedLinear, or a QuantizedEmbedding (its ``as_linear`` is a tied head's
    quantized matmul), with at most one quantization group along K."""
    return (isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))
            and _input_dims(m) <= m.group_size)


def _dense(m: nn.Module) -> nn.Module:
    kwargs = {"mode": m.mode} if hasattr(m, "mode") else {}
    w = mx.dequantize(m.weight, m.scales, m.get("biases"), m.group_size, m.bits,
                      **kwargs)                                   # [out, K], scales' dtype
    return dense_twin(m, w, m.bias if "bias" in m else None)


def apply(model: nn.Module, force: bool = False) -> int:
    """Replace every quantized layer with K <= its group size by its dense twin, on the
    CUDA backend (or anywhere with ``force``, for tests); returns how many were replaced.
    Runs where the model is loaded (the engine thread), after its projections are joined."""
    if not (force or needs_guard()):
        return 0
    return replace_modules(model, [(path, _dense(m)) for path, m in model.named_modules()
                                   if _one_group(m)])
