"""The gated delta rule, the recurrence of Gated DeltaNet layers.

Per value head h (key head h // (Hv // Hk)) and token t, with state S [Dv, Dk]:
    S = g_t * S
    S = S + k_t (beta_t * (v_t - S k_t))^T      (delta rule: write v_t at key k_t)
    y_t = S q_t
The token loop runs inside one op (``mx.fast.gated_delta_update``), so the graph
of a prefill chunk does not grow with its length. Masked tokens (right padding
of ragged rows) leave the state untouched and output zeros.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def decay(A_log: mx.array, a: mx.array, dt_bias: mx.array) -> mx.array:
    """g = exp(-exp(A_log) * softplus(a + dt_bias)) in (0, 1), float32. a: [B, T, Hv]."""
    dt = nn.softplus(a.astype(mx.float32) + dt_bias.astype(mx.float32))
    return mx.exp(-mx.exp(A_log.astype(mx.float32)) * dt)  # [B, T, Hv]


def normalize_qk(q: mx.array, k: mx.array, eps: float = 1e-6) -> tuple[mx.array, mx.array]:
    """L2-normalise q and k over Dk and fold the Dk**-0.5 readout scale into q.

    x / sqrt(sum(x^2) + eps) == rms_norm(x, eps / Dk) / sqrt(Dk), one fused op each.
    """
    dk = q.shape[-1]
    inv = dk ** -0.5
    q = (inv * inv) * mx.fast.rms_norm(q, None, eps * inv * inv)  # [B, T, Hk, Dk]
    k = inv * mx.fast.rms_norm(k, None, eps * inv * inv)          # [B, T, Hk, Dk]
    return q, k


def gated_delta(q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array,
                state: mx.array, mask: mx.array | None = None) -> tuple[mx.array, mx.array]:
    """Run the recurrence over T tokens in one op.

    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]; state [B, Hv, Dv, Dk]
    float32; mask [B, T] bool or None. Returns y [B, T, Hv, Dv] (dtype of v) and
    the new float32 state [B, Hv, Dv, Dk].
    """
    y, new_state = mx.fast.gated_delta_update(
        q, k, v, g.astype(mx.float32), beta.astype(mx.float32),
        state.astype(mx.float32), mask)
    return y.astype(v.dtype), new_state.astype(mx.float32)
