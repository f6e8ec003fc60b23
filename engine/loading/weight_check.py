"""Every parameter a model expects is in its weights, with the shape its config implies.

Quantized weights are stored packed (eight 4-bit values per uint32 column), so
a raw shape such as (576, 72) means nothing to a user who knows the model as
576 wide; mismatches are reported in logical shapes, with the bit widths.
"""
from __future__ import annotations

from pathlib import Path

import mlx.nn as nn
from mlx.utils import tree_flatten

from engine.errors import ModelLoadError


def check_weights(model: nn.Module, weights: dict, origin: dict, where: Path) -> None:
    """Every parameter present with the shape the config implies; say which tensor and file."""
    expected = dict(tree_flatten(model.parameters()))
    missing = [k for k in expected if k not in weights]
    if missing:
        raise ModelLoadError(f"{where}: tensor '{missing[0]}' is missing"
                             f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''};"
                             " the download is incomplete or the config does not match.")
    modules = dict(model.named_modules())
    for name, param in expected.items():
        if weights[name].shape != param.shape:
            found, implied = _logical(modules, weights, name, param.shape)
            raise ModelLoadError(
                f"{where}: tensor '{name}' in {origin.get(name, 'the weights')} has shape "
                f"{found} but the config implies {implied}.")
    extra = [k for k in weights if k not in expected]
    if extra:
        raise ModelLoadError(f"{where}: unexpected tensor '{extra[0]}' in "
                             f"{origin.get(extra[0], 'the weights')}; is this the right model?")


def _logical(modules: dict, weights: dict, name: str, expected: tuple) -> tuple[str, str]:
    """(found, implied) shapes as text; a packed weight shows its unpacked shape and bits."""
    found = tuple(weights[name].shape)
    base, _, part = name.rpartition(".")
    module = modules.get(base)
    bits, group = getattr(module, "bits", None), getattr(module, "group_size", None)
    if part != "weight" or not bits or not group:
        return str(found), str(tuple(expected))
    implied = (*expected[:-1], expected[-1] * 32 // bits)
    scales = weights.get(f"{base}.scales")
    if scales is None or not scales.shape or not found:
        return f"{found} (as stored)", f"{implied} at {bits} bits"
    width = scales.shape[-1] * group                  # the file's own logical width
    stored_bits = found[-1] * 32 // width if width else bits
    return (f"{(*found[:-1], width)} at {stored_bits} bits",
            f"{implied} at {bits} bits")
