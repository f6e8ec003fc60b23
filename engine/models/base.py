"""The contract between the runner and a model family.

A model module (llama.py, qwen3_5.py) exposes:
- ``ModelArgs.from_config(config: dict) -> ModelArgs`` (frozen dataclass)
- ``Model(args)``: an ``mlx.nn.Module`` with
    ``__call__(tokens [B, T] int32, view: BatchView, cache: ModelCache) -> logits``
    logits are [B, T, V] when ``view.all_logits`` else [B, 1, V] (each row's last token),
    ``cache_spec() -> CacheSpec`` and ``sanitize(weights: dict) -> dict``.
The model never owns scheduling: it reads the view and reads/writes the cache.
Optionally ``fuse_projections()``: join projections after loading (the engine calls it).
Layers that can launch a custom kernel hold a ``kernel_set`` (kernels/kernel_set.py,
plain-mx only until ``use_kernels`` gives them the loaded model's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from kernels.kernel_set import KernelSet


@dataclass(frozen=True)
class StateSpec:
    """One per-sequence state array of a recurrent layer (shape excludes the slot axis)."""
    shape: tuple[int, ...]
    dtype: mx.Dtype


@dataclass(frozen=True)
class CacheSpec:
    num_kv_layers: int          # attention layers that keep paged K/V
    num_kv_heads: int
    head_dim: int
    kv_dtype: mx.Dtype
    # For each recurrent layer, in layer order: the state arrays it keeps per slot.
    state_layers: tuple[tuple[StateSpec, ...], ...] = field(default_factory=tuple)

    def kv_bytes_per_token(self) -> int:
        """K and V of every attention layer for one token: the one bytes-per-token fact."""
        return 2 * self.num_kv_layers * self.num_kv_heads * self.head_dim * self.kv_dtype.size

    def state_bytes_per_slot(self) -> int:
        """Every recurrent layer's state arrays for one sequence."""
        return sum(math.prod(s.shape) * s.dtype.size for layer in self.state_layers
                   for s in layer)


class ModelCache:
    """Paged K/V pools and recurrent-state slot arrays, owned by the runner.

    ``kv[i]`` is ``[k_pool, v_pool]`` of attention layer i, each
    [num_pages * page_size, num_kv_heads, head_dim]. ``states[j]`` is the list of
    slot arrays of recurrent layer j, each [num_slots, *StateSpec.shape].
    Layers replace entries in place (``cache.kv[i][0] = new_pool``).
    """

    def __init__(self, spec: CacheSpec, num_pages: int, page_size: int, num_slots: int):
        self.spec = spec
        self.page_size = page_size
        self.num_pages = num_pages
        self.num_slots = num_slots
        flat = (num_pages * page_size, spec.num_kv_heads, spec.head_dim)
        self.kv = [[mx.zeros(flat, spec.kv_dtype), mx.zeros(flat, spec.kv_dtype)]
                   for _ in range(spec.num_kv_layers)]
        self.states = [[mx.zeros((num_slots, *s.shape), s.dtype) for s in layer]
                       for layer in spec.state_layers]

    def arrays(self) -> list[mx.array]:
        """Everything a step writes, to evaluate together with its outputs."""
        out = [a for pair in self.kv for a in pair]
        return out + [a for layer in self.states for a in layer]

    def set_arrays(self, arrays: list[mx.array]) -> None:
        """Replace every array, in the order of arrays() (a compiled forward's outputs)."""
        rest = iter(arrays)
        for group in self.kv + self.states:       # in place: the lists keep their identity
            group[:] = [next(rest) for _ in group]

    def with_arrays(self, arrays: list[mx.array]) -> ModelCache:
        """A cache of the same layout over other arrays, in the order of arrays() (the
        traced inputs of a compiled forward); this one is not changed."""
        other = object.__new__(ModelCache)
        other.spec, other.page_size = self.spec, self.page_size
        other.num_pages, other.num_slots = self.num_pages, self.num_slots
        other.kv = [list(pair) for pair in self.kv]
        other.states = [list(layer) for layer in self.states]
        other.set_arrays(arrays)
        return other


def use_kernels(model: nn.Module, kernels: KernelSet) -> None:
    """Give every layer of `model` that can launch a custom kernel this kernel set."""
    for _, module in model.named_modules():
        if hasattr(module, "kernel_set"):
            module.kernel_set = kernels


def kernel_set_of(model: nn.Module) -> KernelSet | None:
    """The kernel set `use_kernels` gave `model`'s layers (the sampler launches from it
    too), or None for a model without kernel-capable layers."""
    return next((m.kernel_set for _, m in model.named_modules() if hasattr(m, "kernel_set")),
                None)


def fuse_projections(model: nn.Module) -> None:
    """Join the projections that read the same input, where the family can (after
    loading; engine/models/fused.py). Fewer operations per step, the same numbers."""
    fuse = getattr(model, "fuse_projections", None)
    if fuse is not None:
        fuse()
