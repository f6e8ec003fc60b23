"""Batched and chunked forwards equal one sequence run alone in one shot."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from float32_tolerance import assert_close, model_depth, rounding_spread
from qwen_fixtures import Rows, build_model, random_weights, tiny_config

import engine.models.gated_delta as gated_delta

RNG = np.random.default_rng(7)
PROMPTS = {0: RNG.integers(0, 320, 13).tolist(), 1: RNG.integers(0, 320, 5).tolist(),
           2: RNG.integers(0, 320, 9).tolist(), 3: RNG.integers(0, 320, 21).tolist()}
MODEL_TYPES = ["qwen3_5_moe", "qwen3_5", "qwen3_next"]


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model(request):
    config = tiny_config(request.param)
    return build_model(config, random_weights(config, seed=3))


@pytest.fixture(params=["best", "kernel"], autouse=True)
def recurrence(request, monkeypatch):
    """Run each test with the recurrence this device picks and with mx.fast's op forced."""
    if request.param == "kernel":
        monkeypatch.setattr(gated_delta, "fast_op_is_a_kernel", lambda device: True)
    return request.param


def alone(model, prompt: list[int], steps: int, feed: list[int] | None = None
          ) -> list[mx.array]:
    """Last-token logits of the prompt, then of each greedy decode step (or of the tokens
    in ``feed``), one row at a time."""
    rows = Rows(model)
    rows.start(0)
    out = [rows.forward({0: prompt})]
    for i in range(steps):
        token = feed[i] if feed else int(mx.argmax(out[-1][0, -1]).item())
        out.append(rows.forward({0: [token]}))
    return out


def greedy(logits: list[mx.array]) -> list[int]:
    return [int(mx.argmax(x[0, -1]).item()) for x in logits]


def same(model, got: mx.array, want: mx.array, tokens: int, what: str = "",
         spread=None) -> None:
    """Equal up to float32 reordering (tests/float32_tolerance.py) after ``tokens``."""
    assert_close(got, want, model_depth(model, tokens), what, spread)


def test_rows_of_different_lengths_equal_each_row_alone(model):
    """A ragged prefill of 3 rows, then decode with a 4th row joining mid-way on a stale slot."""
    steps = 8
    expect = {s: alone(model, p, steps) for s, p in PROMPTS.items()}
    spread = {s: rounding_spread(model, lambda p=p, e=e: mx.concatenate(
        alone(model, p, steps, greedy(e)), axis=1)) for (s, p), e in
        zip(PROMPTS.items(), expect.values())}                    # [1, 1 + steps, V]
    rows = Rows(model)
    # Dirty slot 3 first: the row that later reuses it must start from zeros.
    rows.start(99, slot=3)
    rows.forward({99: PROMPTS[3][:7]})
    for s in (0, 1, 2):
        rows.start(s)
    got = {s: [] for s in PROMPTS}
    logits = rows.forward({s: PROMPTS[s] for s in (0, 1, 2)})
    for b, s in enumerate((0, 1, 2)):
        got[s].append(logits[b:b + 1])
    rows.start(3, slot=3)       # seq 99 is done: its slot goes to seq 3, stale state and all
    for step in range(steps):
        chunks = {s: [int(mx.argmax(got[s][-1][0, -1]).item())] for s in (0, 1, 2)}
        if step == 2:               # a prompt prefilled in the same forward as three decodes
            chunks[3] = PROMPTS[3]
        elif step > 2:
            chunks[3] = [int(mx.argmax(got[3][-1][0, -1]).item())]
        logits = rows.forward(chunks)
        for b, s in enumerate(chunks):
            got[s].append(logits[b:b + 1])
    for s in PROMPTS:
        for i, (g, e) in enumerate(zip(got[s], expect[s])):
            assert greedy([g]) == greedy([e]), f"row {s}, step {i}"
            same(model, g, e, len(PROMPTS[s]) + i, f"row {s}, step {i}",
                 spread[s][:, i:i + 1])


def test_all_logits_of_a_ragged_batch_equal_each_row_alone(model):
    rows = Rows(model)
    for s in (0, 1, 2):
        rows.start(s)
    batch = rows.forward({s: PROMPTS[s] for s in (0, 1, 2)}, all_logits=True)
    assert batch.shape == (3, 13, 320)
    for b, s in enumerate((0, 1, 2)):
        one = Rows(model)
        one.start(0)
        ref = one.forward({0: PROMPTS[s]}, all_logits=True)
        same(model, batch[b:b + 1, :len(PROMPTS[s])], ref, len(PROMPTS[s]), f"row {s}")


@pytest.mark.parametrize("chunk", [1, 5, 16])
def test_chunked_prefill_equals_one_shot(model, chunk):
    prompt = PROMPTS[3] + PROMPTS[0]                      # 34 tokens
    one_shot = Rows(model)
    one_shot.start(0)
    ref = one_shot.forward({0: prompt}, all_logits=True)  # [1, 34, V]

    def one_shot_then_decode():
        again = Rows(model)
        again.start(0)
        out = [again.forward({0: prompt}, all_logits=True)]
        return mx.concatenate(out + [again.forward({0: [t]}) for t in (1, 2, 3)], axis=1)
    spread = rounding_spread(model, one_shot_then_decode)   # [1, 34 + 3, V]
    rows = Rows(model)
    rows.start(0)
    parts = [rows.forward({0: prompt[i:i + chunk]}, all_logits=True)
             for i in range(0, len(prompt), chunk)]
    n = len(prompt)
    same(model, mx.concatenate(parts, axis=1), ref, n, "prompt", spread[:, :n])
    # The state left behind is the same too: the next decode steps agree.
    for i, token in enumerate((1, 2, 3)):
        same(model, rows.forward({0: [token]}), one_shot.forward({0: [token]}),
             n + i + 1, f"decode {i}", spread[:, n + i:n + i + 1])


def test_states_are_scattered_to_their_own_slots(model):
    """Rows write only their own slots; an idle slot keeps its bits."""
    rows = Rows(model)
    rows.start(0, slot=5)
    rows.start(1, slot=2)
    before = [np.array(a) for layer in rows.cache.states for a in layer]
    rows.forward({0: PROMPTS[0], 1: PROMPTS[1]})
    after = [np.array(a) for layer in rows.cache.states for a in layer]
    for b, a in zip(before, after):
        untouched = [i for i in range(a.shape[0]) if i not in (2, 5)]
        np.testing.assert_array_equal(a[untouched], b[untouched])
        assert np.abs(a[2]).max() > 0 and np.abs(a[5]).max() > 0
