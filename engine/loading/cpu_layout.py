"""How dense float32 weights are laid out for MKL's small-batch matmuls on the CPU.

A decode step multiplies a few rows (the batch) by every weight. ``nn.Linear`` computes
``x @ W.T`` with W [out, in]; MLX hands that to ``cblas_sgemm`` as a transposed
operand. MKL does the same product 1.2-1.8x faster at 8 rows when W^T is what is
stored ([in, out] row-major, an untransposed operand), and equally fast at 1 row
(docs/bench/HISTORY.md, "CPU"). So after loading, on the CPU, each layer's float32 weight
is stored column-major: the array is still W [out, in] to every reader (shapes, slices,
the peer benchmark's copies), only its strides change, and ``W.T`` is contiguous.

The vocabulary head ([49152, 576] for the built-in model) is the exception: MKL
multiplies 8 rows by it 1.6x faster in blocks of ``HEAD_BLOCK`` output rows than in
one call, in either layout, and a tied head is also the embedding table (looked up by
row: kept row-major). Heads are multiplied block by block (``blocked_matmul``).
Nothing changes on a GPU, for quantized layers, or for other dtypes.
``TANDEM_CPU_LAYOUT=off`` keeps the layout as loaded (A/B benchmarks).
"""
from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

ENV_VAR = "TANDEM_CPU_LAYOUT"
HEAD_ROWS = 8192      # a weight with more output rows than this is a vocabulary head
HEAD_BLOCK = 1536     # output rows per matmul of a head
BLOCKED_MAX_ROWS = 64  # inputs of more rows than this (whole-prompt logits) run in one call


def blocked_matmul(x: mx.array, weight: mx.array) -> mx.array:
    """x [..., in] @ weight[out, in].T -> [..., out], in HEAD_BLOCK output blocks when
    x has few rows (a decode batch, each prompt's last token)."""
    rows = x.size // x.shape[-1]
    out = weight.shape[0]
    if rows > BLOCKED_MAX_ROWS or out <= HEAD_BLOCK:
        return x @ weight.T
    return mx.concatenate([x @ weight[i:i + HEAD_BLOCK].T                # [..., block]
                           for i in range(0, out, HEAD_BLOCK)], axis=-1)


class BlockedHeadEmbedding(nn.Embedding):
    """An embedding table that is also the (tied) head: its ``as_linear`` runs in blocks."""

    def as_linear(self, x: mx.array) -> mx.array:
        return blocked_matmul(x, self.weight)


class BlockedHeadLinear(nn.Linear):
    """An untied vocabulary head, multiplied in blocks."""

    def __call__(self, x: mx.array) -> mx.array:
        y = blocked_matmul(x, self.weight)
        return y + self.bias if "bias" in self else y


def column_major(w: mx.array) -> mx.array:
    """The same [out, in] array stored as [in, out] row-major (w.T is contiguous)."""
    return mx.contiguous(w.T).T


def arrange(model: nn.Module) -> int:
    """On the CPU: float32 layer weights column-major, vocabulary heads blocked.
    Returns how many modules changed (0 on a GPU or with TANDEM_CPU_LAYOUT=off)."""
    if mx.default_device().type != mx.DeviceType.cpu:
        return 0
    if os.environ.get(ENV_VAR, "").lower() in ("off", "0"):
        return 0
    changed = [(path, _arranged(m)) for path, m in model.named_modules()
               if type(m) in (nn.Linear, nn.Embedding) and m.weight.dtype == mx.float32]
    changed = [(path, m) for path, m in changed if m is not None]
    if changed:
        model.update_modules(tree_unflatten(changed))
        mx.eval(model.parameters())
    return len(changed)


def _arranged(m: nn.Module) -> nn.Module | None:
    head = m.weight.shape[0] > HEAD_ROWS
    if isinstance(m, nn.Embedding):
        return _retyped(m, BlockedHeadEmbedding) if head else None
    if head:
        return _retyped(m, BlockedHeadLinear)
    m.weight = column_major(m.weight)
    return m


def _retyped(m: nn.Module, kind: type) -> nn.Module:
    """A `kind` module holding m's arrays (no copy)."""
    new = kind.__new__(kind)
    nn.Module.__init__(new)
    for name, value in m.parameters().items():
        setattr(new, name, value)
    return new
