"""The decode forward as one mx.compile'd function (on a GPU).

A decode step of the hybrid MoE model is ~1,300 operations. Building that graph in
Python costs ~0.70 ms per 4-layer block on the 2-core dev machine (~7 ms a step), and the GPU
runs the whole step in ~7.7 ms (docs/bench/HISTORY.md, "Where a decode step goes"): the
step was bound by the host. A compiled function is traced once per input shape; later
calls replay the recorded graph from C++ with new inputs, and MLX fuses its chains of
elementwise operations into single kernels on the way (fewer launches to encode too).

Purity is the price: nothing the trace does in Python happens again on a replay. So
the model never sees the real cache here: it sees a ModelCache made of the traced
inputs, and the arrays it leaves there are returned and put into the real cache after
the call. Everything Python decides from the view (ragged, context_len, page size...)
is part of the key that picks the compiled function, so a replay can never take a
branch its trace did not. The shapes (batch size, block-table width) are mx.compile's
own key; the runner keeps them to a small set (engine/core/shapes.py, and block tables
in power-of-two widths) so that traces stay few.
"""
from __future__ import annotations

import warnings

import mlx.core as mx

from engine.core.batch_view import BatchView
from engine.models.base import ModelCache

# BatchView's array fields, in the order the compiled function takes them.
_VIEW_ARRAYS = ("offsets", "lengths", "positions", "slot_mapping", "block_tables",
                "state_slots")


def compiles_forward(setting: bool | None) -> bool:
    """EngineConfig.compile_decode, or when None: on a GPU. (On the CPU, MLX compiles a
    fused kernel with the system's C++ compiler, which a user's machine may lack, and
    the step is bound by the matmuls, not by building the graph.)"""
    if setting is not None:
        return setting
    return mx.default_device().type == mx.DeviceType.gpu


class CompiledForward:
    """``model(tokens, view, cache)`` through mx.compile, one function per static view
    layout; the cache's arrays are inputs and outputs."""

    def __init__(self, model):
        self.model = model
        self._fns: dict[tuple, object] = {}
        self._plain: set[tuple] = set()     # layouts whose trace failed: run uncompiled

    def __call__(self, tokens: mx.array, view: BatchView, cache: ModelCache) -> mx.array:
        key = _static_key(view)
        if key in self._plain:
            return self.model(tokens, view, cache)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = mx.compile(self._traced(key, cache))
        arrays = [getattr(view, name) for name in _VIEW_ARRAYS]
        if view.route_rows is not None:
            arrays.append(view.route_rows)
        try:
            outputs = fn(tokens, *arrays, *cache.arrays())
        except (ValueError, RuntimeError) as e:
            # A layout mx.compile cannot trace (an MLX version's limit) runs plain: a
            # slower step, never a failed one. Said once per layout.
            warnings.warn(f"decode runs uncompiled for {key}: {e}", RuntimeWarning,
                          stacklevel=2)
            self._plain.add(key)
            del self._fns[key]
            return self.model(tokens, view, cache)
        cache.set_arrays(outputs[1:])
        return outputs[0]

    @property
    def num_layouts(self) -> int:
        return len(self._fns)

    def _traced(self, key: tuple, cache: ModelCache):
        page_size, num_tokens, ragged, all_logits, context_len, any_fresh, routed = key
        n_view = len(_VIEW_ARRAYS) + int(routed)

        def forward(tokens, *inputs):
            view_arrays, cache_arrays = inputs[:n_view], inputs[n_view:]
            view = BatchView(*view_arrays[:len(_VIEW_ARRAYS)], page_size=page_size,
                             num_tokens=num_tokens, ragged=ragged, all_logits=all_logits,
                             context_len=context_len, any_fresh=any_fresh,
                             route_rows=view_arrays[-1] if routed else None)
            traced_cache = cache.with_arrays(list(cache_arrays))
            logits = self.model(tokens, view, traced_cache)
            return [logits, *traced_cache.arrays()]
        return forward


def _static_key(view: BatchView) -> tuple:
    """Everything the model reads from the view as a Python value (see the module
    docstring); the order matches CompiledForward._traced."""
    return (view.page_size, view.num_tokens, view.ragged, view.all_logits,
            view.context_len, view.any_fresh, view.route_rows is not None)
