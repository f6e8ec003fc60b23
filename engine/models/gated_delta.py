"""The gated delta rule, the recurrence of Gated DeltaNet layers.

Per value head h (key head h // (Hv // Hk)) and token t, with state S [Dv, Dk]:
    S = g_t * S
    S = S + k_t (beta_t * (v_t - S k_t))^T      (delta rule: write v_t at key k_t)
    y_t = S q_t
The graph of a prefill chunk must not grow with its length. Where MLX has a
kernel for ``mx.fast.gated_delta_update`` (Metal) the token loop runs inside it.
Elsewhere (the CPU backend) MLX unrolls that op into ~30 graph nodes per token,
so we use the closed "one block" form instead: the T updates become a unit
lower-triangular system solved in one op, O(T^2) work, constant graph size.
Masked tokens (right padding of ragged rows) leave the state untouched and
output zeros.
"""
from __future__ import annotations

import io
from functools import cache

import mlx.core as mx


def normalize_qk(q: mx.array, k: mx.array, eps: float = 1e-6) -> tuple[mx.array, mx.array]:
    """L2-normalise q and k over Dk and fold the Dk**-0.5 readout scale into q.

    x / sqrt(sum(x^2) + eps) == rms_norm(x, eps / Dk) / sqrt(Dk), one op each: the
    scales are rms_norm's weight (constant vectors), not a multiply after it.
    """
    dk = q.shape[-1]
    inv = dk ** -0.5
    q = mx.fast.rms_norm(q, _scale(dk, inv * inv, q.dtype), eps * inv * inv)  # [B, T, Hk, Dk]
    k = mx.fast.rms_norm(k, _scale(dk, inv, k.dtype), eps * inv * inv)        # [B, T, Hk, Dk]
    return q, k


@cache
def _scale(dims: int, value: float, dtype: mx.Dtype) -> mx.array:
    """[dims] filled with value: a constant, made once (the scalar is rounded to dtype,
    as a Python float times a dtype array would be)."""
    w = mx.full((dims,), value, dtype=dtype)
    mx.eval(w)
    return w


def gated_delta(q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array,
                state: mx.array, mask: mx.array | None = None,
                impl: str | None = None) -> tuple[mx.array, mx.array]:
    """Run the recurrence over T tokens with a graph whose size does not depend on T.

    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]; state [B, Hv, Dv, Dk]
    float32; mask [B, T] bool or None. Returns y [B, T, Hv, Dv] (dtype of v) and
    the new float32 state [B, Hv, Dv, Dk]. impl: "kernel", "block" or None (best here).
    """
    if impl is None:
        fast = fast_op_is_a_kernel(str(mx.default_device()))
        impl = "kernel" if fast else ("step" if q.shape[1] == 1 else "block")
    g, beta, state = (a.astype(mx.float32) for a in (g, beta, state))
    if impl == "step":      # decode: one token, a handful of ops on the default device
        y, new_state = gated_delta_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], state,
                                        None if mask is None else mask[:, 0])
        y = y[:, None]
    elif impl == "kernel":
        y, new_state = mx.fast.gated_delta_update(q, k, v, g, beta, state, mask)
    else:
        with mx.stream(mx.cpu):   # the block form needs linalg and float64: CPU ops
            y, new_state = gated_delta_block(q, k, v, g, beta, state, mask)
    return y.astype(v.dtype), new_state.astype(mx.float32)


def gated_delta_step(q, k, v, g, beta, state, mask=None):
    """One token: q, k [B, Hk, Dk]; v [B, Hv, Dv]; g, beta [B, Hv]; state [B, Hv, Dv, Dk]."""
    r = v.shape[1] // q.shape[1]
    q, k = (mx.repeat(x, r, axis=1).astype(mx.float32) if r > 1 else x.astype(mx.float32)
            for x in (q, k))                                                 # [B, Hv, Dk]
    s = state * g[..., None, None]                                          # [B, Hv, Dv, Dk]
    kv_mem = (s @ k[..., None])[..., 0]                                     # [B, Hv, Dv]
    delta = (v.astype(mx.float32) - kv_mem) * beta[..., None]               # [B, Hv, Dv]
    s = s + delta[..., None] * k[..., None, :]                              # [B, Hv, Dv, Dk]
    y = (s @ q[..., None])[..., 0]                                          # [B, Hv, Dv]
    if mask is not None:    # a padded token leaves the state as it was and outputs zeros
        s = mx.where(mask[:, None, None, None], s, state)
        y = mx.where(mask[:, None, None], y, 0.0)
    return y, s


def gated_delta_block(q, k, v, g, beta, state, mask=None):
    """All T steps at once. With u_t = beta_t (v_t - g_t S_{t-1} k_t) and G = cumsum(log g):
        S_t = e^{G_t} S_0 + sum_{i<=t} e^{G_t - G_i} u_i k_i^T
    so U solves (I + L) U = beta (V - e^G K S_0^T), L[t,i] = beta_t e^{G_t-G_i} k_t.k_i (i < t),
    and y_t = e^{G_t} S_0 q_t + sum_{i<=t} e^{G_t - G_i} (k_i.q_t) u_i.
    """
    T, r = q.shape[1], v.shape[2] // q.shape[2]
    q, k = (mx.repeat(x, r, axis=2).transpose(0, 2, 1, 3).astype(mx.float32)
            for x in (q, k))                                                 # [B, Hv, T, Dk]
    vt = v.transpose(0, 2, 1, 3).astype(mx.float32)                         # [B, Hv, T, Dv]
    log_g = mx.log(mx.maximum(g, 1e-30))     # g may underflow to 0: e^-69 is as good  # [B, T, Hv]
    if mask is not None:   # padding: g = 1 and beta = 0 leave the state as it was
        log_g = mx.where(mask[..., None], log_g, 0.0)
        beta = mx.where(mask[..., None], beta, 0.0)
    # float64 sums: G_t - G_i must stay exact when |G| grows large over a long chunk.
    G = mx.cumsum(log_g.astype(mx.float64), axis=1).transpose(0, 2, 1)     # [B, Hv, T]
    beta = beta.transpose(0, 2, 1)[..., None]                               # [B, Hv, T, 1]
    causal = mx.tril(mx.ones((T, T), dtype=mx.bool_))                       # i <= t
    diff = mx.where(causal, G[..., :, None] - G[..., None, :], -mx.inf)
    decay_ti = mx.exp(diff.astype(mx.float32))                              # [B, Hv, T, T]
    last = (G[..., -1:] - G).astype(mx.float32)                             # [B, Hv, T]
    G = G.astype(mx.float32)
    eye = mx.eye(T, dtype=mx.float32)
    lower = beta * decay_ti * (k @ k.swapaxes(-1, -2)) * (1.0 - eye)        # [B, Hv, T, T]
    s0t = state.swapaxes(-1, -2)                                            # [B, Hv, Dk, Dv]
    eG = mx.exp(G)[..., None]                                               # [B, Hv, T, 1]
    rhs = beta * (vt - eG * (k @ s0t))                                      # [B, Hv, T, Dv]
    u = mx.linalg.solve_triangular(eye + lower, rhs, upper=False)           # [B, Hv, T, Dv]
    y = eG * (q @ s0t) + (decay_ti * (q @ k.swapaxes(-1, -2))) @ u          # [B, Hv, T, Dv]
    w = mx.exp(last)[..., None]                                             # [B, Hv, T, 1]
    new_state = mx.exp(G[..., -1])[..., None, None] * state \
        + (u * w).swapaxes(-1, -2) @ k                                      # [B, Hv, Dv, Dk]
    if mask is not None:
        y = mx.where(mask[:, None, :, None], y, 0.0)
    return y.transpose(0, 2, 1, 3), new_state                               # [B, T, Hv, Dv]


@cache
def fast_op_is_a_kernel(device: str) -> bool:
    """Whether mx.fast.gated_delta_update is one node here (a kernel) or unrolled per token."""
    def nodes(T: int) -> int:
        x = mx.zeros((1, T, 1, 32))
        y, s = mx.fast.gated_delta_update(x, x, x, x[..., 0], x[..., 0], mx.zeros((1, 1, 32, 32)))
        dot = io.StringIO()
        mx.export_to_dot(dot, y, s)
        return dot.getvalue().count("shape=rectangle")
    return nodes(2) == nodes(8)
