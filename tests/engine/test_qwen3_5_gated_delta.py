"""The gated delta recurrence op against an independent float32 numpy loop."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine.models.elementwise import decay_and_beta
from engine.models.gated_delta import gated_delta, normalize_qk

B, T, HK, HV, DK, DV = 3, 64, 2, 4, 16, 8
TOL = 1e-4


def inputs(seed: int = 0):
    r = np.random.default_rng(seed)
    q = r.standard_normal((B, T, HK, DK)).astype(np.float32)
    k = r.standard_normal((B, T, HK, DK)).astype(np.float32)
    q /= np.linalg.norm(q, axis=-1, keepdims=True) * np.sqrt(DK)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = r.standard_normal((B, T, HV, DV)).astype(np.float32)
    g = r.uniform(0.8, 1.0, (B, T, HV)).astype(np.float32)
    beta = r.uniform(0.0, 1.0, (B, T, HV)).astype(np.float32)
    state = r.standard_normal((B, HV, DV, DK)).astype(np.float32)
    return q, k, v, g, beta, state


def reference(q, k, v, g, beta, state, mask=None):
    """Token by token, head by head: value head h reads key head h // (HV // HK)."""
    S = state.copy()                                                      # float32
    y = np.zeros((B, T, HV, DV), np.float32)
    for b in range(B):
        for t in range(T):
            if mask is not None and not mask[b, t]:
                continue                      # padding: state untouched, output zero
            for h in range(HV):
                hk = h // (HV // HK)
                s = g[b, t, h] * S[b, h]                                  # [Dv, Dk]
                delta = beta[b, t, h] * (v[b, t, h] - s @ k[b, t, hk])    # [Dv]
                S[b, h] = s + np.outer(delta, k[b, t, hk])
                y[b, t, h] = S[b, h] @ q[b, t, hk]
    return y, S


IMPLS = ["kernel", "block"]   # mx.fast.gated_delta_update; our closed block form


def run(args, mask=None, impl=None):
    y, s = gated_delta(*map(mx.array, args), None if mask is None else mx.array(mask), impl=impl)
    return np.array(y), np.array(s)


def ragged_mask():
    lengths = np.array([T, 40, 1])
    return np.arange(T)[None, :] < lengths[:, None]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("masked", [False, True])
def test_op_matches_numpy_over_64_steps(masked, impl):
    args = inputs()
    mask = ragged_mask() if masked else None
    y, s = run(args, mask, impl)
    y_ref, s_ref = reference(*args, mask)
    assert y.shape == (B, T, HV, DV) and s.shape == (B, HV, DV, DK) and s.dtype == np.float32
    np.testing.assert_allclose(y, y_ref, atol=TOL, rtol=0)
    np.testing.assert_allclose(s, s_ref, atol=TOL, rtol=0)
    assert np.abs(s - args[-1]).max() > 0.1        # the state did move


@pytest.mark.parametrize("impl", IMPLS)
def test_masked_row_state_equals_its_unpadded_run(impl):
    args = inputs(1)
    _, s = run(args, ragged_mask(), impl)
    *per_token, state = args
    short = [a[1:2, :40] for a in per_token] + [state[1:2]]   # row 1 alone, unpadded
    _, s_short = run(short, impl=impl)
    np.testing.assert_allclose(s[1:2], s_short, atol=TOL, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("where", ["y", "state"])
def test_comparison_catches_a_planted_error(where, impl):
    args = inputs(2)
    out = dict(zip(("y", "state"), run(args, impl=impl)))
    ref = dict(zip(("y", "state"), reference(*args)))
    np.testing.assert_allclose(out[where], ref[where], atol=TOL, rtol=0)
    out[where][(1, 37, 2, 5) if where == "y" else (2, 3, 1, 7)] += 1e-3
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(out[where], ref[where], atol=TOL, rtol=0)


def test_decay_and_normalize_match_their_formulas():
    r = np.random.default_rng(3)
    a, A_log, dt_bias = (r.standard_normal(s).astype(np.float32) for s in ((B, T, HV), HV, HV))
    g, beta = decay_and_beta(mx.array(A_log), mx.array(a), mx.array(dt_bias), mx.array(a))
    g_ref = np.exp(-np.exp(A_log) * np.log1p(np.exp(a + dt_bias)))
    np.testing.assert_allclose(np.array(g), g_ref, rtol=1e-5)
    np.testing.assert_allclose(np.array(beta), 1 / (1 + np.exp(-a)), rtol=1e-5)
    q, k = (r.standard_normal((B, T, HK, DK)).astype(np.float32) for _ in range(2))
    qn, kn = map(np.array, normalize_qk(mx.array(q), mx.array(k)))
    l2 = lambda x: x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)  # noqa: E731
    np.testing.assert_allclose(qn, l2(q) / np.sqrt(DK), atol=1e-5)
    np.testing.assert_allclose(kn, l2(k), atol=1e-5)


def test_block_form_survives_strong_decay():
    """|G| reaches thousands: decays must come out as exact differences, not inf - inf."""
    r = np.random.default_rng(4)
    q, k, v, _, beta, state = inputs(4)
    g = np.where(r.uniform(size=(B, T, HV)) < 0.5, 1e-20, 0.999).astype(np.float32)
    args = (q, k, v, g, beta, state)
    y, s = run(args, impl="block")
    y_ref, s_ref = reference(*args)
    assert np.isfinite(y).all() and np.isfinite(s).all()
    np.testing.assert_allclose(y, y_ref, atol=TOL, rtol=0)
    np.testing.assert_allclose(s, s_ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("masked", [False, True])
def test_decode_step_matches_numpy_one_token_at_a_time(masked):
    """The T=1 path (decode), fed 64 tokens one call each, equals the numpy loop."""
    args = inputs(5)
    mask = ragged_mask() if masked else None
    q, k, v, g, beta, state = args
    s = mx.array(state)
    ys = []
    for t in range(T):
        sl = slice(t, t + 1)
        y, s = gated_delta(mx.array(q[:, sl]), mx.array(k[:, sl]), mx.array(v[:, sl]),
                           mx.array(g[:, sl]), mx.array(beta[:, sl]), s,
                           None if mask is None else mx.array(mask[:, sl]), impl="step")
        ys.append(np.array(y))
    y_ref, s_ref = reference(*args, mask)
    assert np.abs(np.concatenate(ys, axis=1) - y_ref).max() < TOL
    assert np.abs(np.array(s) - s_ref).max() < TOL
