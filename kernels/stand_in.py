"""Stand-ins for GPU launches, so the graph a GPU step runs can be counted on any machine.

Building a graph runs nothing, but two things in a GPU step cannot be built on a
machine without a GPU backend: our custom kernels (``mx.fast.cuda_kernel`` refuses
to construct without CUDA) and the single primitives of ``mx.fast`` (rms_norm,
layer_norm, rope, scaled_dot_product_attention), which on a CPU stream are built as
their fallback graphs of 5-15 elementwise ops each (so is ``mx.dequantize``, which
a quantized embedding runs once a step). A stand-in is one graph node
(``mx.depends`` of placeholders of the real outputs' shapes and dtypes on the real
inputs) and one tally in the active `Ledger`: the graph downstream is the one the
GPU builds, and a counter adds one launch per tally (kernels/README.md, "Counting").

Nothing here computes: the outputs are zeros. Only engine/bench/profile_ops uses it.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import mlx.core as mx

COUNT = "count"     # the KernelSet backend whose launches are stand-ins


@dataclass
class Ledger:
    """Stand-in launches made while building a graph, by name; and the distinct kernel
    instances among them (`instances`: what MLX compiles one module for)."""
    calls: dict[str, int] = field(default_factory=dict)
    instances: set = field(default_factory=set)

    def add(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def clear(self) -> None:
        self.calls.clear()


_ledger: list[Ledger] = []       # the active one while `gpu_graph()` is entered
_placeholders: dict[tuple, mx.array] = {}


def _placeholder(shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    key = (tuple(shape), dtype)
    if key not in _placeholders:
        _placeholders[key] = mx.zeros(shape, dtype)
        mx.eval(_placeholders[key])
    return _placeholders[key]


def stand_in(name: str, inputs: list, shapes: list, dtypes: list) -> list[mx.array]:
    """Outputs of one launch: one graph node that depends on every array input."""
    if not _ledger:
        raise RuntimeError("stand-in launches are only built inside kernels.stand_in.gpu_graph()")
    _ledger[-1].add(name)
    deps = [a for a in inputs if isinstance(a, mx.array)]
    return mx.depends([_placeholder(s, d) for s, d in zip(shapes, dtypes)], deps)


class StandInKernel:
    """Takes the place of an ``mx.fast.cuda_kernel`` object: same call, stand-in outputs."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *, inputs, output_shapes, output_dtypes, template=(), **_launch):
        outputs = stand_in(self.name, list(inputs), list(output_shapes), list(output_dtypes))
        _ledger[-1].instances.add(instance(self.name, inputs, output_dtypes, template))
        return outputs


def instance(name: str, inputs, output_dtypes, template=()) -> tuple:
    """What makes MLX compile a custom kernel's module anew: the kernel, its template
    arguments, its inputs' dtypes and whether each is an array with a shape (the source
    MLX builds declares those), its outputs' dtypes (mlx/backend/cuda/custom_kernel.cpp);
    not the shapes, the grid or the threadgroup."""
    return (name, tuple((k, str(v)) for k, v in template),
            tuple((str(a.dtype), a.ndim > 0) for a in inputs),
            tuple(str(d) for d in output_dtypes))


def _out_dtype(x: mx.array, *others) -> mx.Dtype:
    """The result dtype of x with its optional weight/bias (as mx.fast promotes them)."""
    acc = mx.zeros((), x.dtype)
    for o in others:
        if isinstance(o, mx.array):
            acc = acc + mx.zeros((), o.dtype)
    return acc.dtype


def _rms_norm(x, weight, eps, **_):
    return stand_in("rms_norm", [x, weight], [x.shape], [_out_dtype(x, weight)])[0]


def _layer_norm(x, weight, bias, eps, **_):
    return stand_in("layer_norm", [x, weight, bias], [x.shape],
                    [_out_dtype(x, weight, bias)])[0]


def _rope(a, dims, *, offset, freqs=None, **_):
    return stand_in("rope", [a, offset, freqs], [a.shape], [a.dtype])[0]


def _sdpa(q, k, v, *, scale, mask=None, sinks=None, **_):
    shape = (*q.shape[:-1], v.shape[-1])
    return stand_in("sdpa", [q, k, v, mask, sinks], [shape], [q.dtype])[0]


_FAST = {"rms_norm": _rms_norm, "layer_norm": _layer_norm, "rope": _rope,
         "scaled_dot_product_attention": _sdpa}


def _dequantize(w, scales, biases=None, group_size=None, bits=None, mode="affine",
                dtype=None, **_):
    """mx.dequantize (a quantized embedding's rows): one primitive on the GPU, a graph
    of shifts and masks on the CPU."""
    shape = (*w.shape[:-1], w.shape[-1] * 32 // (bits or 4))
    return stand_in("dequantize", [w, scales, biases], [shape], [dtype or scales.dtype])[0]


@contextmanager
def gpu_graph():
    """Within: mx.fast's GPU primitives, mx.dequantize and KernelSet(COUNT) launches build stand-ins,
    tallied in the yielded Ledger. Restores mx.fast on exit."""
    saved = {name: getattr(mx.fast, name) for name in _FAST}
    saved_dequantize = mx.dequantize
    ledger = Ledger()
    _ledger.append(ledger)
    for name, fn in _FAST.items():
        setattr(mx.fast, name, fn)
    mx.dequantize = _dequantize
    try:
        yield ledger
    finally:
        for name, fn in saved.items():
            setattr(mx.fast, name, fn)
        mx.dequantize = saved_dequantize
        _ledger.pop()
