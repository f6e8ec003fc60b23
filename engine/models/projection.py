"""A linear layer's product, through kernels/qmm_rows.py where that kernel applies.

``layer(x)`` runs ``mx.quantized_matmul`` for a quantized layer. For a decode batch of
2-32 rows of a 4- or 8-bit affine layer on CUDA, the model asks its kernel set first
(`KernelSet.qmm_rows`): MLX's tiled kernel spends ~4.7 ms of a B=16 step of the
35B-A3B model there (kernels/qmm_rows.py says why). Anything else (one row, a prompt
chunk past 32 rows, dense layers, a layer with a bias, the CPU) is ``layer(x)`` as
before.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from kernels.kernel_set import KernelSet


def project(kernels: KernelSet, layer: nn.Module, x: mx.array) -> mx.array:
    """layer(x), by kernels.qmm_rows where it applies."""
    if (getattr(layer, "mode", "affine") == "affine" and "scales" in layer
            and "bias" not in layer):
        y = kernels.qmm_rows(x, layer.weight, layer.scales, layer.get("biases"),
                             layer.group_size, layer.bits)
        if y is not None:
            return y
    return layer(x)
