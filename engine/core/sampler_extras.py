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


def host_values(array: mx.array) -> list:
    """The values of an array that was queued with its step (mx.async_eval), read whole.

    The wait ends when that step's own work is done. Reading a part instead
    (`ids[row].item()`) first makes a new op and evaluates it: on a GPU it goes on the
    stream behind everything queued since (the next step's forward), so the host waits
    for all of that and the device then idles while the host builds what comes next.
    """
    return array.tolist()


class _Sample:
    """One step's sample of a tracked row: the step's ids [B] (lazy), the row, its
    logprob arrays (or None), and its token once the host has read it."""

    def __init__(self, ids: mx.array, row: int, arrays):
        self.ids, self.row, self.arrays = ids, row, arrays
        self._token: int | None = None

    @property
    def token(self) -> int:
        if self._token is None:
            self._token = int(host_values(self.ids)[self.row])
        return self._token


class SampleTracker:
    """A grammar or logprob row's samples until the engine appends their tokens.

    The engine queues step n+1 before it reads step n's token, so a grammar's mask for
    n+1 needs token n early: feed_early() reads it then (a host wait, for batches with
    a constrained row only; the sampler queues step n+1's forward first) and confirm()
    checks it when it is appended, from the value already read. Logprobs ride along,
    queued with their step, and are read with the token.
    """

    def __init__(self, params: SamplingParams):
        self.params = params
        self.samples: deque[_Sample] = deque()
        self.num_fed = 0                       # the oldest samples, already fed

    @staticmethod
    def wanted(params: SamplingParams) -> bool:
        return params.constraint is not None or params.logprobs is not None

    def record(self, ids: mx.array, row: int, arrays) -> None:
        self.samples.append(_Sample(ids, row, arrays))

    def feed_early(self) -> None:
        for sample in list(self.samples)[self.num_fed:]:
            self.params.constraint.accept(sample.token)
            self.num_fed += 1

    def confirm(self, token_id: int) -> None:
        sample = self._take(token_id)
        constraint = self.params.constraint
        if constraint is not None:
            if self.num_fed:         # the sample taken was fed early, and is token_id
                self.num_fed -= 1
            else:                    # not fed yet, or a dropped step's token was: redo
                self._rollback()
                constraint.accept(token_id)
        if self.params.token_log is not None:
            self.params.token_log.append(_token_logprob(token_id, sample, self.params.logprobs))

    def _take(self, token_id: int) -> _Sample | None:
        """The oldest sample that produced token_id; older ones (steps whose tokens the
        engine dropped, e.g. a preemption) are discarded."""
        while self.samples:
            sample = self.samples.popleft()
            if sample.token == token_id:
                return sample
            self._rollback()         # it may have fed the grammar a token that never came
        return None

    def _rollback(self) -> None:
        if self.num_fed:
            self.params.constraint.rollback(self.num_fed)
            self.num_fed = 0


def _token_logprob(token_id: int, sample: _Sample | None, num_top: int) -> TokenLogprob:
    if sample is None or sample.arrays is None:
        return TokenLogprob(token_id, float("nan"))
    row = sample.row
    chosen, top_ids, top = (None if a is None else host_values(a) for a in sample.arrays)
    if top_ids is None or num_top == 0:
        return TokenLogprob(token_id, chosen[row])
    return TokenLogprob(token_id, chosen[row],
                        tuple(zip(top_ids[row][:num_top], top[row][:num_top])))
