"""What an API request adds to sampling, batched per row like the rest of the sampler:
logit_bias, a grammar's token mask (TokenConstraint) and the sampled tokens' logprobs.

Each is skipped entirely when no row of the batch uses it, so plain batches pay nothing.
Rows that do not use one get a neutral row (bias 0, every id allowed), so a constrained
request and unconstrained ones share one step.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from engine.sampling_params import SamplingParams, TokenLogprob


def apply_logit_bias(logits: mx.array, params: Sequence[SamplingParams]) -> mx.array:
    """Add each row's bias to its ids, as one gather + one scatter. logits [B, V] float32."""
    if not any(p.logit_bias for p in params):
        return logits
    num_vocab = logits.shape[-1]
    rows = [[(t, b) for t, b in p.logit_bias if t < num_vocab] for p in params]
    width = max(len(r) for r in rows) or 1
    # Pad with a copy of the row's first pair so duplicate writes carry equal values;
    # an empty row adds 0 to id 0.
    rows = [r + [r[0] if r else (0, 0.0)] * (width - len(r)) for r in rows]
    ids = mx.array([[t for t, _ in r] for r in rows], dtype=mx.int32)          # [B, L]
    bias = mx.array([[b for _, b in r] for r in rows], dtype=mx.float32)       # [B, L]
    seen = mx.take_along_axis(logits, ids, axis=-1)                            # [B, L]
    return mx.put_along_axis(logits, ids, seen + bias, axis=-1)


def apply_constraints(logits: mx.array, params: Sequence[SamplingParams]) -> mx.array:
    """Set to -inf the ids each constrained row's grammar forbids. logits [B, V]."""
    if not any(p.constraint is not None for p in params):
        return logits
    num_rows, num_vocab = logits.shape
    words = (num_vocab + 31) // 32
    bitmask = np.full((num_rows, words), -1, dtype=np.int32)   # -1: every id allowed
    for i, p in enumerate(params):
        if p.constraint is not None:
            p.constraint.fill_mask(bitmask[i])
    bits = mx.array(bitmask)[:, :, None] >> mx.arange(32, dtype=mx.int32)     # [B, W, 32]
    allowed = (bits & 1).reshape(num_rows, words * 32)[:, :num_vocab] == 1    # [B, V]
    return mx.where(allowed, logits, -mx.inf)


def logprob_arrays(logits: mx.array, ids: mx.array, num_top: int):
    """(chosen [B], top ids [B, k], top logprobs [B, k]) of log_softmax(logits), lazy;
    logits [B, V] are the model's (before filters and bias)."""
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)          # [B, V]
    chosen = mx.take_along_axis(logprobs, ids[:, None].astype(mx.int32), axis=-1)[:, 0]
    if num_top == 0:
        return chosen, None, None
    top_ids = mx.argpartition(-logprobs, kth=num_top - 1, axis=-1)[:, :num_top]  # [B, k]
    top = mx.take_along_axis(logprobs, top_ids, axis=-1)
    order = mx.argsort(-top, axis=-1)                                         # likeliest first
    return (chosen, mx.take_along_axis(top_ids, order, axis=-1),
            mx.take_along_axis(top, order, axis=-1))


class SampleTracker:
    """A grammar or logprob row's samples until the engine appends their tokens.

    The engine queues step n+1 before it reads step n's token, so a grammar's mask for
    n+1 needs token n early: feed_early() reads it then (a sync, for batches with a
    constrained row only) and confirm() checks it when it is appended. Logprobs ride
    along, lazy, and are read with the token.
    """

    def __init__(self, params: SamplingParams):
        self.params = params
        self.samples: deque[tuple] = deque()   # (ids [B], row, logprob arrays or None)
        self.early: list[int] = []             # the oldest samples, already fed

    @staticmethod
    def wanted(params: SamplingParams) -> bool:
        return params.constraint is not None or params.logprobs is not None

    def record(self, ids: mx.array, row: int, arrays) -> None:
        self.samples.append((ids, row, arrays))

    def feed_early(self) -> None:
        for ids, row, _ in list(self.samples)[len(self.early):]:
            token = int(ids[row].item())
            self.params.constraint.accept(token)
            self.early.append(token)

    def confirm(self, token_id: int) -> None:
        entry = self._take(token_id)
        constraint = self.params.constraint
        if constraint is not None:
            if self.early and self.early[0] == token_id:
                self.early.pop(0)
            else:                    # not the token fed early (a dropped step): redo
                self._rollback()
                constraint.accept(token_id)
        if self.params.token_log is not None:
            self.params.token_log.append(_token_logprob(token_id, entry, self.params.logprobs))

    def _take(self, token_id: int):
        """The oldest sample that produced token_id; older ones (steps whose tokens the
        engine dropped, e.g. a preemption) are discarded."""
        while self.samples:
            entry = self.samples.popleft()
            if int(entry[0][entry[1]].item()) == token_id:
                return entry
            self._rollback()         # it may have fed the grammar a token that never came
        return None

    def _rollback(self) -> None:
        if self.early:
            self.params.constraint.rollback(len(self.early))
            self.early.clear()


def _token_logprob(token_id: int, entry, num_top: int) -> TokenLogprob:
    if entry is None or entry[2] is None:
        return TokenLogprob(token_id, float("nan"))
    _, row, (chosen, top_ids, top) = entry
    if top_ids is None or num_top == 0:
        return TokenLogprob(token_id, chosen[row].item())
    pairs = zip(top_ids[row, :num_top].tolist(), top[row, :num_top].tolist())
    return TokenLogprob(token_id, chosen[row].item(), tuple(pairs))
