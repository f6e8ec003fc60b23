"""Batched next-token sampling, run on the engine thread.

One call samples every row of a decode batch with batched array ops: per-row
settings become [B, 1] arrays, so the number of ops does not grow with B.
Nothing here reads a value back to the host; the result is a lazy [B] int32
array the runner can `mx.async_eval`.

Seeds: each request owns its PRNG key (`mx.random.key(seed)`) and splits it
once per step, and its noise is drawn from that key alone (vmap over rows),
so a seeded request samples the same tokens alone or inside any batch.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

import mlx.core as mx

from engine.sampling_params import SamplingParams

NUM_RECENT = 64  # ids the repetition penalty looks back over

# Per-row key ops, vectorized over the batch: [B, 2] keys in, per-row results out.
_split_keys = mx.vmap(lambda k: mx.random.split(k))                    # [B, 2] -> [B, 2, 2]


def _gumbel_rows(keys: mx.array, num_cols: int) -> mx.array:
    # Row i's noise depends only on keys[i], never on which other rows are present.
    return mx.vmap(lambda k: mx.random.gumbel(shape=(num_cols,), key=k))(keys)  # [B, V]


class RowSampler:
    """Per-request sampler state: settings, PRNG key stream, recent ids.

    The engine makes one per request, calls `sample_batch` each step and
    `append(token)` once the sampled id is known on the host.
    """

    def __init__(self, params: SamplingParams, prompt_ids: Sequence[int] = ()):
        self.params = params
        # Unseeded requests still get their own stream, from Python's (seedable) RNG.
        seed = params.seed if params.seed is not None else random.getrandbits(63)
        self.key = mx.random.key(seed)                                 # [2] uint32
        # The prompt's tail counts too: penalties apply to what the model has seen.
        self.recent: deque[int] = deque(list(prompt_ids)[-NUM_RECENT:], maxlen=NUM_RECENT)

    def append(self, token_id: int) -> None:
        self.recent.append(int(token_id))


def sample_batch(logits: mx.array, states: Sequence[RowSampler]) -> mx.array:
    """Sample one id per row; advances each sampling row's key. Returns lazy [B] int32."""
    params = [s.params for s in states]
    keys = None
    if not all(p.greedy for p in params):
        split = _split_keys(mx.stack([s.key for s in states]))         # [B, 2, 2]
        for i, state in enumerate(states):
            state.key = split[i, 0]
        keys = split[:, 1]                                             # [B, 2]
    needs_history = any(p.repetition_penalty != 1.0 for p in params)
    histories = [s.recent for s in states] if needs_history else None
    return sample(logits, params, histories, keys)


def sample(logits: mx.array, params: Sequence[SamplingParams],
           histories: Sequence[Sequence[int]] | None = None,
           keys: mx.array | None = None) -> mx.array:
    """Functional core. logits [B, V] (or [B, T, V]: last position); keys [B, 2] per-row
    step keys, or None to draw fresh ones. Returns lazy [B] int32."""
    if logits.ndim == 3:
        logits = logits[:, -1, :]
    if logits.shape[0] != len(params):
        raise ValueError(f"{logits.shape[0]} logits rows but {len(params)} sampling params")
    logits = logits.astype(mx.float32)                                 # [B, V]
    if histories is not None and any(p.repetition_penalty != 1.0 for p in params):
        logits = apply_repetition_penalty(logits, params, histories)
    greedy_ids = mx.argmax(logits, axis=-1)                            # [B]
    if all(p.greedy for p in params):
        return greedy_ids.astype(mx.int32)  # the common case: one argmax, no sort, no noise
    if keys is None:
        keys = mx.random.split(mx.random.key(random.getrandbits(63)), len(params))
    sampled = _sample_rows(logits, params, keys)
    is_greedy = mx.array([p.greedy for p in params])                   # [B]
    return mx.where(is_greedy, greedy_ids, sampled).astype(mx.int32)


def _column(values: list, dtype=mx.float32) -> mx.array:
    return mx.array(values, dtype=dtype)[:, None]                      # [B, 1]


def _sample_rows(logits: mx.array, params: Sequence[SamplingParams], keys: mx.array) -> mx.array:
    # Greedy rows get temperature 1 here; their result is replaced by argmax anyway.
    temps = _column([p.temperature if not p.greedy else 1.0 for p in params])
    # Unnormalized log-probabilities: every use below is unchanged by a per-row constant
    # (Gumbel-max's argmax, the top-p softmax, min-p's difference to the best), so no
    # logsumexp pass (an exp over [B, V]: ~6 ms a step at B=8 on a 2-core CPU).
    logprobs = logits / temps                                          # [B, V]
    filtered = any(p.top_k > 0 or p.top_p < 1.0 or p.min_p > 0.0 for p in params)
    if not filtered:
        # Gumbel-max: argmax(logp + G) is an exact draw from softmax(logp).
        return mx.argmax(logprobs + _gumbel_rows(keys, logprobs.shape[-1]), axis=-1)
    order = mx.argsort(-logprobs, axis=-1)                             # [B, V] best first
    sorted_lp = mx.take_along_axis(logprobs, order, axis=-1)           # [B, V]
    keep = _keep_mask(sorted_lp, params)
    masked = mx.where(keep, sorted_lp, -mx.inf)
    pick = mx.argmax(masked + _gumbel_rows(keys, masked.shape[-1]), axis=-1)  # [B] rank
    return mx.take_along_axis(order, pick[:, None], axis=-1)[:, 0]     # [B] token id


def _keep_mask(sorted_lp: mx.array, params: Sequence[SamplingParams]) -> mx.array:
    """Which ranks survive top-k, then top-p (over the top-k mass), then min-p. [B, V] bool."""
    num_vocab = sorted_lp.shape[-1]
    rank = mx.arange(num_vocab)[None, :]                               # [1, V]
    top_k = _column([p.top_k if p.top_k > 0 else num_vocab for p in params], mx.int32)
    keep = rank < top_k
    # top-p on the renormalized top-k distribution (as HF and vLLM order them).
    probs = mx.softmax(mx.where(keep, sorted_lp, -mx.inf), axis=-1)    # [B, V]
    mass_before = mx.cumsum(probs, axis=-1) - probs                    # mass of better ranks
    top_p = _column([p.top_p for p in params])
    keep = keep & ((mass_before < top_p) | (top_p >= 1.0))             # rank 0 always kept
    # min-p: keep tokens with p >= min_p * p_max; log(0) = -inf keeps everything.
    log_min_p = mx.log(_column([p.min_p for p in params]))
    return keep & (sorted_lp >= sorted_lp[:, :1] + log_min_p)


def apply_repetition_penalty(logits: mx.array, params: Sequence[SamplingParams],
                             histories: Sequence[Sequence[int]]) -> mx.array:
    """CTRL-style penalty on each row's last NUM_RECENT ids, as one gather + one scatter."""
    recent = [list(h)[-NUM_RECENT:] for h in histories]
    width = max((len(r) for r in recent), default=0)
    if width == 0:
        return logits
    # Pad with a copy of the row's own first id so duplicate writes carry equal values;
    # an empty row points at id 0 with penalty 1, which rewrites it unchanged.
    ids = [r + [r[0] if r else 0] * (width - len(r)) for r in recent]
    penalty = _column([p.repetition_penalty if r else 1.0 for p, r in zip(params, recent)])
    ids = mx.array(ids, dtype=mx.int32)                                # [B, L]
    seen = mx.take_along_axis(logits, ids, axis=-1)                    # [B, L]
    seen = mx.where(seen > 0, seen / penalty, seen * penalty)
    return mx.put_along_axis(logits, ids, seen, axis=-1)
