"""Batched next-token sampling, run on the engine thread.

One call samples every row of a decode batch with batched array ops: per-row
settings become [B, 1] arrays, so the number of ops does not grow with B.
Nothing here reads a value back to the host; the result is a lazy [B] int32
array the runner can `mx.async_eval`.

Seeds: each request owns its PRNG key (`mx.random.key(seed)`) and splits it
once per step, and its one uniform per step is drawn from that key alone (vmap
over rows), so a seeded request samples the same tokens alone or inside any batch.

Sampling rows draw by inverse CDF (running sum of the kept weights, one uniform; or,
where the kernel set has it, kernels/cdf_draw's one launch), not V Gumbel numbers.
top-k reads the sorted top max(k) values (mx.topk). top-p alone finds its cut by a
fixed 31-step bisection on the probability order, one masked sum per step, which never
sorts the vocabulary (a CPU sort of 248k ids costs more), or, where the model's kernel
set has it (a GPU), by kernels/top_p_cut's radix select (a pass a launch, over the whole
GPU). On a GPU the graph runs through mx.compile (its elementwise chains fused:
`_compiled_draw`). All are exact: the kept set is the one a stable sort by
probability would give (ties at a cut keep the lowest ids), up to float32
rounding of the sums. The filters themselves: engine/core/sampling_keep.py.
"""
from __future__ import annotations

import random
import threading
import weakref
from collections import deque
from collections.abc import Sequence

import mlx.core as mx

from engine.core.sampler_extras import (
    SampleTracker,
    apply_constraints,
    apply_logit_bias,
    logprob_arrays,
)
from engine.core.sampling_keep import exp_weights, keep_mask, row_sum
from engine.core.sampling_rows import GraphShape, RowSettings, column
from engine.sampling_params import SamplingParams
from engine.settings_spec import chat_defaults

NUM_RECENT = 64  # ids the repetition penalty looks back over

# Per-row key ops, vectorized over the batch: [B, 2] keys in, per-row results out.
_split_keys = mx.vmap(lambda k: mx.random.split(k))                    # [B, 2] -> [B, 2, 2]
# Row i's draw depends only on keys[i], never on which other rows are present.
_uniform_rows = mx.vmap(lambda k: mx.random.uniform(key=k))            # [B, 2] -> [B]

_BELOW_ONE = 1.0 - 2.0 ** -23  # exact in float32


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
        # Grammar and logprob rows: their samples until append() (sampler_extras.py).
        self.tracker = SampleTracker(params) if SampleTracker.wanted(params) else None

    def append(self, token_id: int) -> None:
        self.recent.append(int(token_id))
        if self.tracker is not None:
            self.tracker.confirm(int(token_id))


def sample_batch(logits: mx.array, states: Sequence[RowSampler], kernels=None,
                 compiled: bool | None = None) -> mx.array:
    """Sample one id per row; advances each sampling row's key. Returns lazy [B] int32.
    kernels: the model's KernelSet (top-p's cut and the draw where it runs them), or None.
    compiled: as `sample`'s (None: on a GPU)."""
    params = [s.params for s in states]
    if logits.ndim == 3:
        logits = logits[:, -1, :]
    model_logits = logits = _float32(logits)                           # [B, V]
    grammar_rows = [s for s in states if s.tracker is not None and s.params.constraint is not None]
    if grammar_rows:
        # feed_early waits for the previous step's tokens: queue this step's forward
        # first, so the device runs it while the host waits and fills the masks (else
        # the whole batch loses its host/device overlap; engine/bench/grammar_cost.py).
        # The wait itself is for that step's ids only (sampler_extras.host_values).
        mx.async_eval(logits)
    for s in grammar_rows:
        s.tracker.feed_early()
    logits = apply_constraints(apply_logit_bias(logits, params), params)
    ids = _sample_batch(logits, states, params, kernels, compiled)
    _track_samples(model_logits, ids, states)
    return ids


def _track_samples(logits: mx.array, ids: mx.array, states: Sequence[RowSampler]) -> None:
    """Keep each grammar or logprob row's sample (and its logprobs, lazy) until append."""
    tracked = [s.params.logprobs for s in states if s.tracker is not None]
    if not tracked:
        return
    wanted = [k for k in tracked if k is not None]
    arrays = logprob_arrays(logits, ids, max(wanted)) if wanted else None
    if arrays is not None:
        # Queued now, with the step: read later, they would be new work queued behind
        # the next step and the host would wait for all of it (host_values).
        mx.async_eval([a for a in arrays if a is not None])
    for row, s in enumerate(states):
        if s.tracker is not None:
            s.tracker.record(ids, row, arrays if s.params.logprobs is not None else None)


def _sample_batch(logits: mx.array, states: Sequence[RowSampler],
                  params: list[SamplingParams], kernels=None,
                  compiled: bool | None = None) -> mx.array:
    keys = None
    if not all(p.greedy for p in params):
        split = _split_keys(mx.stack([s.key for s in states]))         # [B, 2, 2]
        for i, state in enumerate(states):
            state.key = split[i, 0]
        keys = split[:, 1]                                             # [B, 2]
    needs_history = any(p.repetition_penalty != 1.0 for p in params)
    histories = [s.recent for s in states] if needs_history else None
    return sample(logits, params, histories, keys, kernels, compiled)


def sample(logits: mx.array, params: Sequence[SamplingParams],
           histories: Sequence[Sequence[int]] | None = None,
           keys: mx.array | None = None, kernels=None, compiled: bool | None = None) -> mx.array:
    """Functional core. logits [B, V] (or [B, T, V]: last position); keys [B, 2] per-row
    step keys, or None to draw fresh ones. Returns lazy [B] int32.
    compiled: sampling rows through mx.compile (None: on a GPU; `_compiled_draw`)."""
    if logits.ndim == 3:
        logits = logits[:, -1, :]
    if logits.shape[0] != len(params):
        raise ValueError(f"{logits.shape[0]} logits rows but {len(params)} sampling params")
    logits = _float32(logits)                                          # [B, V]
    if histories is not None and any(p.repetition_penalty != 1.0 for p in params):
        logits = apply_repetition_penalty(logits, params, histories)
    if all(p.greedy for p in params):
        # the common case: one argmax, no sort, no noise
        return mx.argmax(logits, axis=-1).astype(mx.int32)
    if keys is None:
        keys = mx.random.split(mx.random.key(random.getrandbits(63)), len(params))
    rows = RowSettings.of(params, logits.shape[-1])
    if compiled if compiled is not None else _on_gpu():
        return _compiled_draw(kernels, rows.shape)(logits, keys, rows.arrays)
    return _choose(logits, keys, rows.arrays, rows.shape, kernels)


def app_sampling_draws(logits: mx.array, kernels) -> mx.array:
    """logits [1, V] (or [1, 1, V]) sampled at the app's chat settings as one row and as
    two, as two rows of which one is greedy, and at the API's defaults (temperature 1,
    no filter: engine/server/api_request.py) as one row and as two (lazy [9] ids): the
    sampling graphs a first request of the app's or an API client's meets. On a GPU the sampling
    graph is compiled (`_compiled_draw`) and its fused kernels come in two forms, a [B, 1]
    setting read as one value (B = 1) or per row (B > 1): this meets both. A greedy row
    beside sampled ones is a graph of its own (GraphShape.greedy_rows: the argmax and the
    choice between the two), met as soon as a temperature-0 request (the API's, a
    benchmark's probe) joins the app's streams, and its fused kernels would compile inside
    that step: the ~5 s stall, every stream with it, in the first process of each of
    sessions 48-49's H100 leases (docs/PERFORMANCE.md; on the CPU the step after such a
    prompt traces this graph, tests/engine/test_warm_up_sampler_graphs.py; gone on session
    50's H100 with this warm-up, no kernel compiled while a prompt was read). Also what engine/loading/mlx_prewarm.py's sampler
    worker runs, so the modules it compiles are the ones the warm-up meets."""
    settings = chat_defaults()
    params = SamplingParams(temperature=settings["temperature"], top_p=settings["top_p"],
                            seed=0)
    greedy = SamplingParams(temperature=0.0)
    api = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=0)
    pair = mx.concatenate([logits, logits])
    draws = [sample_batch(logits, [RowSampler(params)], kernels),
             sample_batch(pair, [RowSampler(params), RowSampler(params)], kernels),
             sample_batch(pair, [RowSampler(params), RowSampler(greedy)], kernels),
             sample_batch(logits, [RowSampler(api)], kernels),
             sample_batch(pair, [RowSampler(api), RowSampler(api)], kernels)]
    return mx.concatenate(draws)


def _on_gpu() -> bool:
    return mx.default_device().type == mx.DeviceType.gpu


def _choose(logits: mx.array, keys: mx.array, arrays: dict, shape: GraphShape,
            kernels=None) -> mx.array:
    """Each row's id: a greedy row's argmax, a sampling row's draw. [B] int32."""
    sampled = _draw(_kept_weights(logits, arrays, shape, kernels), keys, kernels)
    if not shape.greedy_rows:
        return sampled.astype(mx.int32)
    greedy_ids = mx.argmax(logits, axis=-1)                            # [B]
    return mx.where(arrays["is_greedy"], greedy_ids, sampled).astype(mx.int32)


# One compiled function per thread, kernel set and graph shape (a few: the app's
# settings, the API's); mx.compile itself keeps one trace per input shape (decode batches
# of 1..B rows), in a cache of the calling thread's (engine/core/compile_release.py).
_COMPILED: dict[tuple[int, int, GraphShape], object] = {}


def _compiled_draw(kernels, shape: GraphShape):
    """_choose through mx.compile: its elementwise chains fused, the graph replayed from
    C++ (the app's sampling: 24 kernels a step on the H100, 50 plain; tests/engine/
    test_op_count.py pins the count, test_sampler_compiled.py the ids). The kernel set is
    held weakly, so a model's unload is not kept waiting on this cache."""
    key = (threading.get_ident(), id(kernels), shape)
    fn = _COMPILED.get(key)
    if fn is None:
        ref = weakref.ref(kernels) if kernels is not None else (lambda: None)
        fn = mx.compile(lambda logits, keys, arrays: _choose(logits, keys, arrays, shape, ref()))
        _COMPILED[key] = fn
        if kernels is not None:
            weakref.finalize(kernels, _COMPILED.pop, key, None)
    return fn


def release_compiled_draws() -> int:
    """Drop the compiled draws this thread made (before it ends: compile_release.py);
    how many."""
    mine = [k for k in _COMPILED if k[0] == threading.get_ident()]
    for k in mine:
        del _COMPILED[k]
    return len(mine)


def _float32(x: mx.array) -> mx.array:
    # astype to the same dtype still copies (~0.7 ms for [8, 248k] on a CPU)
    return x if x.dtype == mx.float32 else x.astype(mx.float32)


def filtered_probs(logits: mx.array, params: Sequence[SamplingParams], kernels=None) -> mx.array:
    """The distribution sampling rows draw from: temperature, top-k, top-p, min-p. [B, V]"""
    rows = RowSettings.of(params, logits.shape[-1])
    kept = _kept_weights(logits.astype(mx.float32), rows.arrays, rows.shape, kernels)
    return kept / row_sum(kept)


def _kept_weights(logits: mx.array, arrays: dict, shape: GraphShape, kernels=None) -> mx.array:
    """Unnormalized probabilities (max 1) of the ids the filters keep, 0 elsewhere. [B, V]"""
    # d <= 0 is the ranking key and the only input to the weights, so equal d means
    # equal probability (a tie) and a larger d is never less likely. Shifted before the
    # division (a temperature > 0 keeps the order and d = 0 at the max), so the two are
    # one fused kernel after the max, not one before it and one after.
    d = (logits - mx.max(logits, axis=-1, keepdims=True)) / arrays["temps"]  # [B, V], max 0
    weights = exp_weights(d)                                           # [B, V], max 1
    if not shape.filters:
        return weights
    return mx.where(keep_mask(d, weights, arrays, shape, kernels), weights, 0.0)


def _draw(kept: mx.array, keys: mx.array, kernels=None) -> mx.array:
    """Inverse CDF with one uniform per row: the id whose slice of the running sum of
    `kept` [B, V] (zero = dropped) holds u * total. Returns [B] ids. Each id's slice is
    its weight rounded to the running sum's float32 ulp (<= 2**-24 of the total: float32
    rounding, nothing coarser); dropped ids have empty slices. Where the model's kernel
    set runs kernels/cdf_draw (a GPU), one launch finds the id by levels of partial sums
    instead of writing the running sum (the same slices to float32 rounding)."""
    u = _uniform_rows(keys)[:, None]                                   # [B, 1]
    drawn = kernels.cdf_draw(kept, u) if kernels is not None else None
    if drawn is not None:
        return drawn
    running = mx.cumsum(kept, axis=-1)                                 # [B, V]
    total = running[:, -1:]                                            # [B, 1]
    # Below total (total * (1 - 2**-23) rounds down), so the id found always has weight.
    t = mx.minimum(u * total, total * _BELOW_ONE)                      # [B, 1]
    return mx.sum(running <= t, axis=-1)                               # [B]


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
    penalty = column([p.repetition_penalty if r else 1.0 for p, r in zip(params, recent)])
    ids = mx.array(ids, dtype=mx.int32)                                # [B, L]
    seen = mx.take_along_axis(logits, ids, axis=-1)                    # [B, L]
    seen = mx.where(seen > 0, seen / penalty, seen * penalty)
    return mx.put_along_axis(logits, ids, seen, axis=-1)
