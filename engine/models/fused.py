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


@dataclass(frozen=True)
class Parts:
    """The joined layers' names and output widths, in order (not a Module child)."""
    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def cuts(self) -> list[int]:
        return [sum(self.sizes[:i]) for i in range(1, len(self.sizes))]


class FusedLinear(nn.Module):
    """Layers over one input run as one: ``__call__`` returns each part's output."""

    def __init__(self, joined: nn.Module, parts: Parts):
        super().__init__()
        self.joined = joined
        self.parts = parts

    def __call__(self, x: mx.array, *args) -> list[mx.array]:
        return mx.split(self.joined(x, *args), self.parts.cuts, axis=-1)  # [.., out_i] each

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
    params = {k: mx.concatenate([m[k] for m in layers], axis=_out_axis(v))
              for k, v in layers[0].parameters().items()}
    joined = copy.copy(layers[0])          # same kind and quantization settings
    joined.update(params)
    sizes = tuple(m.weight.shape[_out_axis(m.weight)] for m in layers)
    for n in names:
        del owner[n]
    owner[fused_name] = FusedLinear(joined, Parts(names, sizes))
    return True


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
