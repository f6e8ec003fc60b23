"""Which part of the model built each operation of a forward's graph.

profile_ops counts a whole step; to see where a prompt chunk's operations come from,
this wraps the calls of a layer's parts (the sequence mixers, the MoE block / MLP, the
layer-level norms) while the graph is built, and gives each part the primitives that
appeared in the graph during its call (and the stand-in launches it tallied). A part
called inside another part (the shared expert's MLP, the attention's q/k norms)
counts for the outer one. What no part built (the embedding, the head, arrays built
once per forward before the first layer) is the rest: the total minus the parts.

Only engine/bench uses it.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import mlx.core as mx
import mlx.nn as nn

from engine.bench.profile_ops import ops_by_primitive


def _arrays(obj) -> list:
    """The mx arrays in a call's arguments or result: lists and tuples one level deep
    (the cache entry lists a mixer rewrites), and the arrays a RowGroups' views built
    once per forward (kv_index, masks: built by the first layer, read by the others)."""
    if isinstance(obj, mx.array):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [a for item in obj for a in _arrays(item)]
    views = getattr(obj, "views", None)
    if isinstance(views, list):
        cached = [v for view in views for v in vars(view).values()]
        return _arrays(cached + list(vars(obj).values()))
    return []


def _ops(arrays: list) -> Counter:
    return ops_by_primitive(*arrays) if arrays else Counter()


class PartLedger:
    """Per part: the primitives (views excluded) and stand-in launches of its calls.

    A call's own ops are those of the graph after it (its result and every array
    argument, rewritten caches included) less those of the graph before it: counted as
    multisets, since a compiled function's calls share one primitive object."""

    def __init__(self, launches):
        self.launches = launches            # the active kernels.stand_in.Ledger, or None
        self.ops: dict[str, Counter] = {}
        self.calls: Counter = Counter()
        self.last_call: dict[str, Counter] = {}
        self._depth = 0

    def track(self, part: str, call, *args, **kwargs):
        if self._depth:                      # inside another part: counts for that one
            return call(*args, **kwargs)
        inputs = [*args, *kwargs.values()]
        before = _ops(_arrays(inputs))
        launched = Counter(self.launches.calls) if self.launches is not None else Counter()
        self._depth += 1
        try:
            out = call(*args, **kwargs)
        finally:
            self._depth -= 1
        own = _ops(_arrays([out, *inputs])) - before
        if self.launches is not None:
            own.update({f"[{k}]": n for k, n in
                        (Counter(self.launches.calls) - launched).items()})
        self.ops.setdefault(part, Counter()).update(own)
        self.calls[part] += 1
        self.last_call[part] = own
        return out


def _wrap(ledger: PartLedger, owner, name: str, part: str):
    original = getattr(owner, name)

    def tracked(*args, **kwargs):
        return ledger.track(part, original, *args, **kwargs)
    setattr(owner, name, tracked)
    return original


@contextmanager
def parts_of_qwen3_5(launches=None):
    """Within: the Qwen3.5 family's layer parts are tracked in the yielded PartLedger."""
    import engine.models.qwen3_5 as qwen
    from engine.models.gated_deltanet import GatedDeltaNet
    from engine.models.mlp import MLP
    from engine.models.moe import SparseMoeBlock
    ledger = PartLedger(launches)
    targets = [(GatedDeltaNet, "__call__", "linear attention"),
               (qwen.Attention, "__call__", "full attention"),
               (SparseMoeBlock, "__call__", "MoE block"), (MLP, "__call__", "MoE block"),
               (nn.RMSNorm, "__call__", "norms"), (qwen, "residual_norm", "norms")]
    saved = [(owner, name, _wrap(ledger, owner, name, part)) for owner, name, part in targets]
    try:
        yield ledger
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
