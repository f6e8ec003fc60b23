"""logit_bias, grammar masks and logprobs in the batched sampler: per row, in one batch."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from fakes import OnlyIds

from engine.core.sampler import RowSampler, sample_batch
from engine.sampling_params import SamplingParams

V = 100


def _logits(seed=0, rows=3):
    return mx.array(np.random.default_rng(seed).normal(size=(rows, V)).astype(np.float32) * 3)


def test_logit_bias_is_per_row():
    logits = _logits()
    plain = SamplingParams(temperature=0)
    best = np.argmax(np.array(logits), axis=-1)
    forced = SamplingParams(temperature=0, logit_bias={7: 100.0})
    banned = SamplingParams(temperature=0, logit_bias=((int(best[2]), -100.0),))
    states = [RowSampler(p) for p in (plain, forced, banned)]
    ids = sample_batch(logits, states).tolist()
    assert ids[0] == best[0] and ids[1] == 7 and ids[2] != best[2]


def test_grammar_mask_only_on_its_row_and_fed_tokens():
    logits = _logits(1, rows=2)
    grammar = OnlyIds({3, 50, 97})
    states = [RowSampler(SamplingParams(temperature=0)),
              RowSampler(SamplingParams(temperature=1.0, seed=1, constraint=grammar))]
    for _ in range(20):
        ids = sample_batch(logits, states)
        for s, t in zip(states, ids.tolist()):
            s.append(t)
        assert ids.tolist()[1] in grammar.allowed
        assert ids.tolist()[0] == int(np.argmax(np.array(logits[0])))
    assert len(grammar.accepted) == 20 and grammar.rolled_back == 0


def test_grammar_sees_the_previous_token_when_steps_are_pipelined():
    """Step n+1 is sampled before step n's token is appended (the engine pipelines):
    the grammar must still get token n first, and exactly once."""
    grammar = OnlyIds(range(V))
    state = RowSampler(SamplingParams(temperature=1.0, seed=3, constraint=grammar))
    first = sample_batch(_logits(2, 1), [state])
    second = sample_batch(_logits(3, 1), [state])      # before first is appended
    assert grammar.accepted == first.tolist()
    state.append(first.item())
    state.append(second.item())
    assert grammar.accepted == first.tolist() + second.tolist() and grammar.rolled_back == 0


def test_logprobs_match_a_float64_reference():
    logits = _logits(4)
    states = [RowSampler(SamplingParams(temperature=0.8, seed=5, logprobs=5)),
              RowSampler(SamplingParams(temperature=0)),
              RowSampler(SamplingParams(temperature=0, logprobs=0))]
    ids = sample_batch(logits, states).tolist()
    for s, t in zip(states, ids):
        s.append(t)
    ref = np.array(logits, dtype=np.float64)
    ref = ref - np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - ref.max(-1, keepdims=True)
    log0, log2 = states[0].params.token_log, states[2].params.token_log
    assert states[1].params.token_log is None
    assert len(log0) == 1 and log0[0].token_id == ids[0]
    assert abs(log0[0].logprob - ref[0, ids[0]]) < 1e-5
    order = np.argsort(-ref[0])[:5]
    assert [t for t, _ in log0[0].top] == order.tolist()
    assert np.allclose([lp for _, lp in log0[0].top], ref[0, order], atol=1e-5)
    assert log2[0].top == () and abs(log2[0].logprob - ref[2].max()) < 1e-5
