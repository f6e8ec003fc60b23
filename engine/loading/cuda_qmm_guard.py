"""Route tiny layers around two MLX CUDA quantized-matmul bugs.

1. On the H200 with MLX 0.32.4's CUDA backend (h200 sessions 9 and 10,
docs/bench/h200-session9-diag_qmm.py), ``mx.quantized_matmul(x, w, scales, biases,
transpose=True, group_size=g, bits=4)`` with K (the input width) equal to the group
size, i.e. one quantization group along K, and more than one input row returns garbage
(max |d| ~3e38 against the CPU, float32 and bfloat16, M=4 or B=4 at K=64/group 64 and
K=128/group 128). That is MLX's Hopper kernel ``qmm_sm90``, which MLX only picks where
the group spans K (mlx/backend/cuda/quantized/qmm/qmm.cu, ``supports_qmm_sm90``).

2. MLX's ``qmm_sm80`` (bf16/f16 inputs, N % 128 == 0; also gather_qmm's kernel) loads two
K tiles of max(64, group) before its loop whatever K is, so with K in one tile it reads a
tile past the end of x and w: right results, but an illegal access where the memory
after the array is unmapped (session 50: a toy model's experts, K = 64, killed a test
worker's CUDA context). engine/models/moe.gathered_qmm routes our own experts around it.

No shape of the real models takes either (their K are 512..2048 with group 64): only tiny
models (hidden 64 with group 64: test models, toy checkpoints). So, on the CUDA backend
only, each quantized layer either bug takes becomes its dequantized dense twin in the
dtype of its scales (the same numbers, a little more memory on a tiny layer), and
mlx-lm's quantized expert layers that bug 2 takes (a reference model, the bench's peer)
go through gathered_qmm. Metal and the CPU are untouched.
tests/kernels/test_mlx_cuda_qmm_one_group.py fails (a strict xfail) once MLX fixes bug 1;
docs/bench/gather_qmm_one_group_check.py shows bug 2 (with CUDA_LAUNCH_BLOCKING=1).
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from engine.loading.cpu_dense import dense_twin, replace_modules
from engine.models.moe import QuantizedSwitchLinear, gathered_qmm, reads_past_k
from kernels.backend import gpu_backend


def needs_guard() -> bool:
    """True where the bug bites: MLX's CUDA backend with the GPU the default device."""
    return gpu_backend() == "cuda"


def _input_dims(m: nn.Module) -> int:
    """K of a quantized layer: its packed [out, K * bits / 32] uint32 weight's width."""
    return m.weight.shape[-1] * 32 // m.bits


def _one_group(m: nn.Module) -> bool:
    """A QuantizedLinear, or a QuantizedEmbedding (its ``as_linear`` is a tied head's
    quantized matmul), whose K is one group (bug 1), or a product qmm_sm80 takes whose K
    is one of its K tiles (bug 2; the activations' dtype is the scales')."""
    if not isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
        return False
    k = _input_dims(m)
    return k <= m.group_size or reads_past_k(k, m.weight.shape[0], m.group_size,
                                             m.scales.dtype)


def _foreign_switch(m: nn.Module) -> bool:
    """A quantized expert layer not of ours (mlx-lm's QuantizedSwitchLinear: a reference
    model or the bench's peer) that qmm_sm80 would read past K in. Ours route themselves
    (engine/models/moe.gathered_qmm)."""
    return (type(m).__name__ == "QuantizedSwitchLinear"
            and not isinstance(m, QuantizedSwitchLinear)
            and reads_past_k(_input_dims(m), m.weight.shape[-2], m.group_size,
                             m.scales.dtype))


class GuardedSwitchLinear(nn.Module):
    """mlx-lm's QuantizedSwitchLinear through gathered_qmm: the same arrays and call."""

    def __init__(self, m: nn.Module):
        super().__init__()
        self.group_size, self.bits, self.mode = m.group_size, m.bits, m.mode
        self.weight, self.scales = m.weight, m.scales
        if m.get("biases") is not None:
            self.biases = m.biases
        if "bias" in m:
            self.bias = m.bias
        self.freeze()

    def __call__(self, x, indices, sorted_indices=False):
        y = gathered_qmm(x, self["weight"], self["scales"], self.get("biases"), None,
                         indices, self.group_size, self.bits, self.mode, sorted_indices)
        if "bias" in self:
            y = y + mx.expand_dims(self["bias"][indices], -2)
        return y


def _dense(m: nn.Module) -> nn.Module:
    kwargs = {"mode": m.mode} if hasattr(m, "mode") else {}
    w = mx.dequantize(m.weight, m.scales, m.get("biases"), m.group_size, m.bits,
                      **kwargs)                                   # [out, K], scales' dtype
    return dense_twin(m, w, m.bias if "bias" in m else None)


def apply(model: nn.Module, force: bool = False) -> int:
    """Replace every quantized layer either bug takes by its dense twin, and mlx-lm's
    quantized expert layers that bug 2 takes by GuardedSwitchLinear, on the CUDA
    backend (or anywhere with ``force``, for tests); returns how many were replaced.
    Runs where the model is loaded (the engine thread), after its projections are joined."""
    if not (force or needs_guard()):
        return 0
    return replace_modules(model, [(path, _dense(m)) for path, m in model.named_modules()
                                   if _one_group(m)]
                           + [(path, GuardedSwitchLinear(m))
                              for path, m in model.named_modules() if _foreign_switch(m)])
