"""Batched and chunked forwards equal one sequence run alone in one shot."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from qwen_fixtures import Rows, build_model, one_rounding_off, random_weights, tiny_config

import engine.models.gated_delta as gated_delta

TOL = 1e-4
# Two float32 paths (batched or chunked, and alone) each round; how far that moves the
# logits is this model's float32 sensitivity, measured per output: the same forward with
# every weight moved by one rounding (x (1 +- 2**-23)). The paths may differ by a few such
# roundings, never by more than NOISE_UNITS of them; a wrong slot or a stale state is O(1).
NOISE_UNITS = 8
RNG = np.random.default_rng(7)
PROMPTS = {0: RNG.integers(0, 320, 13).tolist(), 1: RNG.integers(0, 320, 5).tolist(),
           2: RNG.integers(0, 320, 9).tolist(), 3: RNG.integers(0, 320, 21).tolist()}
MODEL_TYPES = ["qwen3_5_moe", "qwen3_5", "qwen3_next"]


@pytest.fixture(scope="module", params=MODEL_TYPES)
def models(request):
    """The model and its twin with every float32 weight moved by one rounding."""
    config = tiny_config(request.param)
    weights = random_weights(config, seed=3)
    return build_model(config, weights), build_model(config, one_rounding_off(weights))


@pytest.fixture(scope="module")
def model(models):
    return models[0]


@pytest.fixture(params=["best", "kernel"], autouse=True)
def recurrence(request, monkeypatch):
    """Run each test with the recurrence this device picks and with mx.fast's op forced."""
    if request.param == "kernel":
        monkeypatch.setattr(gated_delta, "fast_op_is_a_kernel", lambda device: True)
    return request.param


def alone(model, prompt: list[int], steps: int, tokens: list[int] | None = None) -> list[mx.array]:
    """Last-token logits of the prompt, then of each greedy decode step (or of `tokens`),
    one row at a time."""
    rows = Rows(model)
    rows.start(0)
    out = [rows.forward({0: prompt})]
    for i in range(steps):
        token = int(mx.argmax(out[-1][0, -1]).item()) if tokens is None else tokens[i]
        out.append(rows.forward({0: [token]}))
    return out


def greedy_tokens(out: list[mx.array]) -> list[int]:
    return [int(mx.argmax(o[0, -1]).item()) for o in out]


def tolerance(a: mx.array, moved: mx.array) -> float:
    """TOL, or NOISE_UNITS times the float32 sensitivity |a - moved| where that is larger."""
    return max(TOL, NOISE_UNITS * float(mx.abs(a - moved).max()))


def close(a: mx.array, b: mx.array, tol: float = TOL) -> bool:
    return float(mx.abs(a - b).max()) < tol


def test_rows_of_different_lengths_equal_each_row_alone(models):
    """A ragged prefill of 3 rows, then decode with a 4th row joining mid-way on a stale slot."""
    model, twin = models
    steps = 8
    expect = {s: alone(model, p, steps) for s, p in PROMPTS.items()}
    moved = {s: alone(twin, p, steps, greedy_tokens(expect[s])) for s, p in PROMPTS.items()}
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
        for i, (g, e, m) in enumerate(zip(got[s], expect[s], moved[s])):
            assert close(g, e, tolerance(e, m)), \
                f"row {s}, step {i}: {float(mx.abs(g - e).max())} (tol {tolerance(e, m)})"


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
        assert close(batch[b:b + 1, :len(PROMPTS[s])], ref)


@pytest.mark.parametrize("chunk", [1, 5, 16])
def test_chunked_prefill_equals_one_shot(models, chunk):
    model, twin = models
    prompt = PROMPTS[3] + PROMPTS[0]                      # 34 tokens
    one_shot, moved = Rows(model), Rows(twin)
    one_shot.start(0)
    moved.start(0)
    ref = one_shot.forward({0: prompt}, all_logits=True)  # [1, 34, V]
    ref_moved = moved.forward({0: prompt}, all_logits=True)
    rows = Rows(model)
    rows.start(0)
    parts = [rows.forward({0: prompt[i:i + chunk]}, all_logits=True)
             for i in range(0, len(prompt), chunk)]
    assert close(mx.concatenate(parts, axis=1), ref, tolerance(ref, ref_moved))
    # The state left behind is the same too: the next decode steps agree.
    for token in (1, 2, 3):
        want = one_shot.forward({0: [token]})
        assert close(rows.forward({0: [token]}), want,
                     tolerance(want, moved.forward({0: [token]})))


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
