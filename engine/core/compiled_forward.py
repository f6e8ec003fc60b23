"""The decode forward (and, with EngineConfig.compile_chunks, prompt chunks and mixed
steps) as mx.compile'd functions (on a GPU).

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

from engine.core import pool_scatters
from engine.core.batch_view import BatchView
from engine.core.chunk_pieces import pieces_of
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


def runs_mixed_forwards(config) -> bool:
    """EngineConfig.mixed_forward, or when None: one mixed forward unless the decode rows
    would leave their compiled forward for it (compiled decode, uncompiled chunks) or a
    chunk is read in layer pieces (EngineConfig.chunk_pieces: a forward of its own)."""
    if config.mixed_forward is not None:
        return config.mixed_forward
    if pieces_of(config) > 1:
        return False
    return config.compile_chunks or not compiles_forward(config.compile_decode)


class CompiledForward:
    """``model(tokens, view, cache)`` through mx.compile, one function per static view
    layout; the cache's arrays are inputs and outputs."""

    def __init__(self, model):
        self.model = model
        self._fns: dict[tuple, object] = {}
        self._plain: set[tuple] = set()     # layouts whose trace failed: run uncompiled
        self._scatters: set[tuple] = set()  # layouts whose trace scattered into a pool

    def __call__(self, tokens: mx.array, view: BatchView, cache: ModelCache) -> mx.array:
        key = _static_key(view)
        [logits] = self._replay(key, [tokens, *_view_arrays(view)], cache,
                                lambda: [self.model(tokens, view, cache)])
        return logits

    def groups(self, groups: list[tuple[mx.array, BatchView]], cache: ModelCache) -> list[mx.array]:
        """``model.forward_groups(groups, cache)`` (a mixed step: decode rows and a prompt
        chunk in one forward) through mx.compile, one function per tuple of the groups'
        static layouts -> each group's logits."""
        key = ("groups", *(_static_key(view) for _, view in groups))
        inputs = [a for tokens, view in groups for a in (tokens, *_view_arrays(view))]
        return self._replay(key, inputs, cache,
                            lambda: self.model.forward_groups(groups, cache))

    def _replay(self, key: tuple, inputs: list[mx.array], cache: ModelCache, plain) -> list:
        """The compiled function of `key` on inputs + the cache's arrays -> its logits
        (a list); the cache gets the arrays it returns. plain(): the same, uncompiled."""
        if key in self._plain:
            return plain()
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = mx.compile(self._traced(key, cache))
        noted = pool_scatters.take()
        try:
            outputs = fn(*inputs, *cache.arrays())
            if pool_scatters.take():        # its trace ran now and built a pool scatter
                self._scatters.add(key)
        except (ValueError, RuntimeError) as e:
            # A layout mx.compile cannot trace (an MLX version's limit) runs plain: a
            # slower step, never a failed one. Said once per layout.
            warnings.warn(f"forward runs uncompiled for {key}: {e}", RuntimeWarning,
                          stacklevel=3)
            self._plain.add(key)
            del self._fns[key]
            if noted:
                pool_scatters.note()
            return plain()
        if noted or key in self._scatters:
            pool_scatters.note()
        n = len(outputs) - len(cache.arrays())
        cache.set_arrays(outputs[n:])
        return outputs[:n]

    @property
    def num_layouts(self) -> int:
        return len(self._fns)

    def release(self) -> None:
        """Drop every compiled function (their traces go from MLX's cache of the thread
        that ran them: engine/core/compile_release.py); a later call compiles again."""
        self._fns.clear()

    def _traced(self, key: tuple, cache: ModelCache):
        keys = key[1:] if key[0] == "groups" else (key,)
        sizes = [1 + len(_VIEW_ARRAYS) + int(k[-1]) for k in keys]   # tokens, view arrays

        def forward(*inputs):
            groups, i = [], 0
            for k, n in zip(keys, sizes):
                groups.append((inputs[i], _view(k, inputs[i + 1:i + n])))
                i += n
            traced_cache = cache.with_arrays(list(inputs[i:]))
            if key[0] == "groups":
                logits = self.model.forward_groups(groups, traced_cache)
            else:
                [(tokens, view)] = groups
                logits = [self.model(tokens, view, traced_cache)]
            return [*logits, *traced_cache.arrays()]
        return forward


def _view_arrays(view: BatchView) -> list[mx.array]:
    arrays = [getattr(view, name) for name in _VIEW_ARRAYS]
    return arrays + [view.route_rows] if view.route_rows is not None else arrays


def _view(key: tuple, arrays) -> BatchView:
    """The BatchView a trace sees: the traced arrays, and key's Python values."""
    page_size, num_tokens, ragged, all_logits, context_len, any_fresh, routed = key
    n = len(_VIEW_ARRAYS)
    return BatchView(*arrays[:n], page_size=page_size, num_tokens=num_tokens, ragged=ragged,
                     all_logits=all_logits, context_len=context_len, any_fresh=any_fresh,
                     route_rows=arrays[n] if routed else None)


def _static_key(view: BatchView) -> tuple:
    """Everything the model reads from the view as a Python value (see the module
    docstring); the order matches CompiledForward._traced."""
    return (view.page_size, view.num_tokens, view.ragged, view.all_logits,
            view.context_len, view.any_fresh, view.route_rows is not None)
