"""Projections that read the same input, concatenated at load into one matmul.

A decode step is bound by the number of operations it dispatches, not by bytes:
q/k/v read the same x, so one [out_q + out_k + out_v, in] matmul does the work of
three launches. Output rows of a weight are independent, and so are the rows of an
affine quantization (scales and biases are per row and group), so the joined layer
computes what the separate ones did; its output is split back (views). Stacked
experts ([E, out, in], gathered) join the same way along their out axis.

The model is loaded with mlx-lm's tree (checkpoint names, quantization overrides);
``fuse_linears`` runs after loading and only joins layers of one kind quantized alike.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from engine.models.projection import project, project_normed
from kernels.kernel_set import NO_KERNELS

# On a GPU the joined output is padded with zero rows up to a multiple of this: MLX's
# CUDA tiled quantized matmul takes only N % 128 == 0 and otherwise falls back to a
# naive kernel (the Gated DeltaNet input projection, 12,352 rows: 117 us a call at
# B=8 on the H200, against ~47 us for the tiled one; docs/bench/HISTORY.md).
GPU_ROW_MULTIPLE = 128


@dataclass(frozen=True)
class Parts:
    """The joined layers' names and output widths, in order (not a Module child), and
    the zero rows padded after them."""
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    pad: int = 0

    @property
    def starts(self) -> list[int]:
        """Each part's first column in the joined output (where a kernel reading the
        output unsplit finds it)."""
        return [sum(self.sizes[:i]) for i in range(len(self.sizes))]

    @property
    def cuts(self) -> list[int]:
        """Split points of the joined output; with padding, its start too (dropped)."""
        ends = [sum(self.sizes[:i]) for i in range(1, len(self.sizes) + 1)]
        return ends if self.pad else ends[:-1]


class FusedLinear(nn.Module):
    """Layers over one input run as one: ``__call__`` returns each part's output."""

    def __init__(self, joined: nn.Module, parts: Parts):
        super().__init__()
        self.joined = joined
        self.parts = parts
        self.kernel_set = NO_KERNELS        # the loaded model's own (engine/models/base.py)

    def __call__(self, x: mx.array, *args) -> list[mx.array]:
        return self.split(self.joined_output(x, *args))

    def joined_output(self, x: mx.array, *args, norm: nn.RMSNorm | None = None) -> mx.array:
        """The joined layer's output [.., sum out_i (+ pad)], unsplit: for a kernel that
        reads its parts through their columns (no Split node). norm: x is the layer's
        input before this RMSNorm (applied inside the product where a kernel can)."""
        if norm is not None:
            return project_normed(self.kernel_set, self.joined, x, norm)
        # gathered experts take their ids as args: never a plain projection
        return self.joined(x, *args) if args else project(self.kernel_set, self.joined, x)

    def split(self, joined: mx.array) -> list[mx.array]:
        """joined_output's parts, [.., out_i] each (views)."""
        return mx.split(joined, self.parts.cuts, axis=-1)[:len(self.parts.names)]

    def part_parameters(self) -> dict[str, dict[str, mx.array]]:
        """Each original layer's arrays, cut back out (for tools that want mlx-lm's tree)."""
        out, start = {}, 0
        for name, size in zip(self.parts.names, self.parts.sizes):
            out[name] = {k: _rows(v, start, start + size)
                         for k, v in self.joined.parameters().items()}
            start += size
        return out


def _out_axis(v: mx.array) -> int:
    """The output-row axis: [out, in] and [out] -> 0; stacked experts [E, out, in] -> 1."""
    return max(0, v.ndim - 2)


def _rows(v: mx.array, start: int, stop: int) -> mx.array:
    index = [slice(None)] * v.ndim
    index[_out_axis(v)] = slice(start, stop)
    return v[tuple(index)]


def _quantization(layer: nn.Module):
    return tuple(getattr(layer, k, None) for k in ("group_size", "bits", "mode"))


def can_fuse(layers: list[nn.Module]) -> bool:
    """One kind, one quantization, the same parameters and input width."""
    first = layers[0]
    if len({type(m) for m in layers}) != 1 or "weight" not in first:
        return False
    keys, width = set(first.parameters()), first.weight.shape[-1]
    return all(_quantization(m) == _quantization(first) and set(m.parameters()) == keys
               and m.weight.shape[-1] == width for m in layers)


def fuse_linears(owner: nn.Module, names: tuple[str, ...], fused_name: str) -> bool:
    """Replace owner.<names> by owner.<fused_name> (a FusedLinear); False if they differ
    or were joined already (a model handed to a second engine)."""
    if fused_name in owner or not all(n in owner for n in names):
        return False
    layers = [owner[n] for n in names]
    if not can_fuse(layers):
        return False
    sizes = tuple(m.weight.shape[_out_axis(m.weight)] for m in layers)
    pad = -sum(sizes) % row_multiple()
    params = {k: mx.concatenate([m[k] for m in layers] + _zero_rows(v, pad), axis=_out_axis(v))
              for k, v in layers[0].parameters().items()}
    joined = copy.copy(layers[0])          # same kind and quantization settings
    joined.update(params)
    for n in names:
        del owner[n]
    owner[fused_name] = FusedLinear(joined, Parts(names, sizes, pad))
    return True


def row_multiple() -> int:
    """Joined outputs are padded to a multiple of this: GPU_ROW_MULTIPLE on a GPU, else 1
    (the CPU's matmuls take any width; padding would only add work)."""
    return GPU_ROW_MULTIPLE if mx.default_device().type == mx.DeviceType.gpu else 1


def _zero_rows(v: mx.array, n: int) -> list[mx.array]:
    """[] or n output rows of zeros shaped like v's (weights, scales, biases alike: an
    affine-quantized row with zero scale and bias, or a zero dense row, gives 0)."""
    if not n:
        return []
    shape = list(v.shape)
    shape[_out_axis(v)] = n
    return [mx.zeros(shape, v.dtype)]


def unfused_parameters(model: nn.Module) -> list[tuple[str, mx.array]]:
    """The model's arrays under the names it was loaded with (fused layers cut apart)."""
    out = []
    for path, module in model.named_modules():
        if isinstance(module, FusedLinear):
            owner = path.rsplit(".", 1)[0] if "." in path else ""
            for name, params in module.part_parameters().items():
                out += [(f"{owner}.{name}.{k}".lstrip("."), v) for k, v in params.items()]
    fused = {p for p, m in model.named_modules() if isinstance(m, FusedLinear)}
    out += [(k, v) for k, v in tree_flatten(model.parameters())
            if not any(k.startswith(p + ".") for p in fused)]
    return out
