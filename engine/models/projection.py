"""A linear layer's product, through kernels/qmm_rows.py where that kernel applies.

``layer(x)`` runs ``mx.quantized_matmul`` for a quantized layer. For a decode batch of
2-32 rows of a 4- or 8-bit affine layer on CUDA, the model asks its kernel set first
(`KernelSet.qmm_rows`): MLX's tiled kernel spends ~4.7 ms of a B=16 step of the
35B-A3B model there (kernels/qmm_rows.py says why). Anything else (one row, a prompt
chunk past 32 rows, dense layers, a layer with a bias, the CPU) is ``layer(x)`` as
before.
``project_normed`` is a layer's input norm and its projection: one launch at a single
decode row (kernels/qmv_normed.py), else the norm and ``project``. ``project_added_normed``
adds a residual before the norm (kernels/add_norm_qmv.py: the MoE router's product).
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from kernels.kernel_set import KernelSet


def _affine(layer: nn.Module) -> bool:
    """An affine quantized layer without a bias: what the kernels here take."""
    return (getattr(layer, "mode", "affine") == "affine" and "scales" in layer
            and "bias" not in layer)


def project(kernels: KernelSet, layer: nn.Module, x: mx.array) -> mx.array:
    """layer(x), by kernels.qmm_rows where it applies."""
    if _affine(layer):
        y = kernels.qmm_rows(x, layer.weight, layer.scales, layer.get("biases"),
                             layer.group_size, layer.bits)
        if y is not None:
            return y
    return layer(x)


def project_normed(kernels: KernelSet, layer: nn.Module, x: mx.array,
                   norm: nn.RMSNorm) -> mx.array:
    """layer(norm(x)): at one row through kernels/qmv_normed (the norm inside the
    product: one launch, not two), else the norm and `project`."""
    if _affine(layer):
        y = kernels.qmv_normed(x, norm.weight, norm.eps, layer.weight, layer.scales,
                               layer.get("biases"), layer.group_size, layer.bits)
        if y is not None:
            return y
    return project(kernels, layer, norm(x))


def project_added_normed(kernels: KernelSet, layer: nn.Module, x: mx.array, r: mx.array,
                         norm: nn.RMSNorm) -> tuple[mx.array, mx.array, mx.array] | None:
    """(h = x + r, norm(h), layer(norm(h))) in one launch at one row (kernels/add_norm_qmv),
    or None: the caller adds, normalises and projects as before."""
    if not _affine(layer):
        return None
    return kernels.add_norm_qmv(x, r, norm.weight, norm.eps, layer.weight, layer.scales,
                                layer.get("biases"), layer.group_size, layer.bits)
