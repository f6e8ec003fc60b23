"""Batched sampler: greedy, filters, seeds independent of batch, repetition penalty."""
import mlx.core as mx
import numpy as np
import pytest

from engine.core.sampler import RowSampler, apply_repetition_penalty, sample, sample_batch
from engine.sampling_params import SamplingParams

V = 32


def _logits(rows, seed=0):
    return mx.array(np.random.default_rng(seed).normal(size=(rows, V)).astype(np.float32) * 3)


def _support(probs, n, **params):
    """Tokens drawn by n independently seeded rows that share one crafted distribution."""
    row = np.full(V, -1e9, np.float32)
    row[: len(probs)] = np.log(probs)
    logits = mx.broadcast_to(mx.array(row), (n, V))
    states = [RowSampler(SamplingParams(temperature=1.0, seed=i, **params)) for i in range(n)]
    return np.array(sample_batch(logits, states))


def test_greedy_is_argmax_and_returns_int32():
    logits = _logits(5)
    out = sample(logits, [SamplingParams()] * 5)
    assert out.dtype == mx.int32 and out.shape == (5,)
    assert np.array_equal(np.array(out), np.argmax(np.array(logits), axis=-1))


def test_top_k_one_equals_greedy():
    logits = _logits(6, seed=1)
    params = [SamplingParams(temperature=1.5, top_k=1, seed=i) for i in range(6)]
    states = [RowSampler(p) for p in params]
    assert np.array_equal(np.array(sample_batch(logits, states)), np.argmax(np.array(logits), -1))


def test_mixed_batch_keeps_greedy_rows_greedy():
    logits = _logits(4, seed=2)
    params = [SamplingParams(), SamplingParams(temperature=1.0, seed=1),
              SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9, seed=2)]
    out = np.array(sample_batch(logits, [RowSampler(p) for p in params]))
    expected = np.argmax(np.array(logits), -1)
    assert out[0] == expected[0] and out[2] == expected[2]


def _run(states, row_of_interest, steps=25):
    """Sample `steps` tokens; row i sees logits seeded by (step, i) whatever the batch."""
    tokens = []
    for step in range(steps):
        logits = mx.concatenate([_logits(1, seed=1000 * step + tag) for tag in
                                 [s._tag for s in states]])
        out = np.array(sample_batch(logits, states))
        for s, t in zip(states, out):
            s.append(int(t))
        tokens.append(int(out[row_of_interest]))
    return tokens


def _tagged(params, tag):
    s = RowSampler(params, prompt_ids=[1, 2, 3])
    s._tag = tag
    return s


def test_seeded_sampling_is_reproducible_and_independent_of_batch():
    params = SamplingParams(temperature=1.0, top_p=0.95, repetition_penalty=1.2, seed=1234)
    alone = _run([_tagged(params, 0)], 0)
    again = _run([_tagged(params, 0)], 0)
    others = [_tagged(SamplingParams(), 1), _tagged(SamplingParams(temperature=0.8), 2),
              _tagged(SamplingParams(temperature=1.3, top_k=5, min_p=0.05, seed=9), 3)]
    batched = _run(others[:2] + [_tagged(params, 0)] + others[2:], 2)
    assert alone == again == batched
    other_seed = _run([_tagged(SamplingParams(temperature=1.0, top_p=0.95,
                                              repetition_penalty=1.2, seed=4321), 0)], 0)
    assert other_seed != alone


def test_unfiltered_sampling_follows_the_distribution():
    drawn = _support([0.7, 0.2, 0.1], 3000)
    freq = np.bincount(drawn, minlength=V)[:3] / len(drawn)
    assert np.allclose(freq, [0.7, 0.2, 0.1], atol=0.04)
    assert set(drawn) <= {0, 1, 2}


def test_sampling_follows_softmax_of_shifted_logits_and_temperature():
    """The sampler never normalizes the logits: a row's distribution must still be the
    float64 softmax(logits / T), whatever constant the logits sit at (here +40 and -40),
    with and without top-p (whose softmax and cumulative mass see unnormalized values)."""
    base = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    n, temp = 3000, 0.8
    want = np.exp(base / temp) / np.exp(base / temp).sum()          # float64 reference
    for shift, top_p in ((40.0, 1.0), (-40.0, 1.0), (40.0, 0.95)):
        row = np.full(V, -1e9, np.float32)
        row[:4] = base + shift
        logits = mx.broadcast_to(mx.array(row), (n, V))
        states = [RowSampler(SamplingParams(temperature=temp, top_p=top_p, seed=i))
                  for i in range(n)]
        freq = np.bincount(np.array(sample_batch(logits, states)), minlength=V) / n
        keep = np.cumsum(want) - want < top_p                           # the nucleus
        expected = np.where(keep, want, 0) / want[keep].sum()
        assert np.allclose(freq[:4], expected, atol=0.04), (shift, top_p, freq[:4])
        assert freq[4:].sum() == 0


@pytest.mark.parametrize("params, allowed", [
    ({"top_p": 0.7}, {0, 1}),            # 0.5 + 0.3 reaches 0.7
    ({"top_p": 0.5}, {0}),
    ({"min_p": 0.2}, {0, 1, 2}),         # p >= 0.2 * 0.5
    ({"top_k": 2}, {0, 1}),
    ({"top_k": 3, "top_p": 0.52}, {0}),     # over the top-3 mass 0.5 is 0.526 >= 0.52
    ({"top_k": 3, "min_p": 0.5}, {0, 1}),
])
def test_filters_never_pick_an_excluded_token(params, allowed):
    drawn = set(_support([0.5, 0.3, 0.15, 0.05], 400, **params).tolist())
    assert drawn == allowed


def test_repetition_penalty_lowers_a_repeated_tokens_chance():
    logits = mx.array([[2.0, 1.9, -1.0, 0.5]])
    params = [SamplingParams(repetition_penalty=2.0)]
    penalized = np.array(apply_repetition_penalty(logits, params, [[0, 2, 0]]))
    assert np.allclose(penalized, [[1.0, 1.9, -2.0, 0.5]])  # positive divided, negative multiplied
    # Greedy now avoids the repeated token 0.
    assert int(sample(logits, params, [[0]])[0]) == 1
    assert int(sample(logits, [SamplingParams()], [[0]])[0]) == 0
    # And sampling picks it less often.
    states = [RowSampler(SamplingParams(temperature=1.0, repetition_penalty=2.0, seed=i),
                         prompt_ids=[0]) for i in range(1000)]
    plain = [RowSampler(SamplingParams(temperature=1.0, seed=i)) for i in range(1000)]
    big = mx.broadcast_to(logits, (1000, 4))
    with_penalty = np.mean(np.array(sample_batch(big, states)) == 0)
    without = np.mean(np.array(sample_batch(big, plain)) == 0)
    assert with_penalty < without - 0.1


def test_repetition_penalty_only_looks_at_the_last_64_ids():
    state = RowSampler(SamplingParams(repetition_penalty=3.0), prompt_ids=[5] + [7] * 64)
    assert 5 not in state.recent and len(state.recent) == 64


def test_rows_without_history_are_untouched():
    logits = _logits(2, seed=3)
    params = [SamplingParams(repetition_penalty=2.0), SamplingParams(repetition_penalty=2.0)]
    out = apply_repetition_penalty(logits, params, [[], [4, 4]])
    assert np.array_equal(np.array(out)[0], np.array(logits)[0])
    assert not np.array_equal(np.array(out)[1], np.array(logits)[1])
