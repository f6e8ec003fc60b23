"""Elementwise chains of a step, each compiled into one kernel.

Decode is launch-bound: an unfused ``silu(g) * u`` is three launches per layer,
a fused one is one. ``shapeless=True`` keeps one compiled function for every
batch size and chunk length (these chains only broadcast, never reshape).
"""
from __future__ import annotations

from functools import partial

import mlx.core as mx


@partial(mx.compile, shapeless=True)
def swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) * up."""
    return gate * mx.sigmoid(gate) * up


@partial(mx.compile, shapeless=True)
def sigmoid_gate(x: mx.array, gate: mx.array) -> mx.array:
    """x * sigmoid(gate): the attention output gate and the shared-expert gate."""
    return x * mx.sigmoid(gate)


@partial(mx.compile, shapeless=True)
def silu_gated_norm(y: mx.array, z: mx.array, dtype_like: mx.array) -> mx.array:
    """(y * silu(z)) in float32, cast to dtype_like's dtype: the Gated DeltaNet output gate."""
    y, z = y.astype(mx.float32), z.astype(mx.float32)
    return (y * z * mx.sigmoid(z)).astype(dtype_like.dtype)


@mx.compile     # per shape: shapeless, the taps' casts and broadcasts are left unfused
def causal_conv_silu(x: mx.array, weight: mx.array) -> mx.array:
    """silu(depthwise causal conv) of x [B, K-1+T, C] (the state's K-1 inputs, then the
    chunk's T) with weight [C, K, 1] (nn.Conv1d's, groups=C) -> [B, T, C] in x's dtype,
    float32 inside, as kernels/gdn_conv_step computes a decode step: one fused kernel
    over K shifted views. MLX's GPU Convolution goes through cuDNN, which builds (and
    NVRTC-compiles) a graph for every input shape it meets, kept in memory only: 1.5 s
    of compiling inside the steps of one concurrency run on the H200 and 2.5 s of its
    warm-up (session 21's profile), in every process; and it was a Convolution and a
    SiLU launch where this is one. The fused kernel's source does not depend on the
    shape, so a new chunk length only traces this small function again."""
    K = weight.shape[1]
    T = x.shape[1] - K + 1
    acc = None
    for j in range(K):
        term = x[:, j:j + T].astype(mx.float32) * weight[:, j, 0].astype(mx.float32)
        acc = term if acc is None else acc + term
    return (acc * mx.sigmoid(acc)).astype(x.dtype)


@partial(mx.compile, shapeless=True)
def decay_and_beta(A_log: mx.array, a: mx.array, dt_bias: mx.array, b: mx.array):
    """g = exp(-exp(A_log) * softplus(a + dt_bias)) and beta = sigmoid(b), float32."""
    x = a.astype(mx.float32) + dt_bias.astype(mx.float32)
    softplus = mx.logaddexp(x, 0.0)
    g = mx.exp(-mx.exp(A_log.astype(mx.float32)) * softplus)
    return g, mx.sigmoid(b.astype(mx.float32))


@partial(mx.compile, shapeless=True)
def moe_output(experts: mx.array, shared: mx.array, shared_gate: mx.array,
               residual: mx.array) -> mx.array:
    """residual + (experts + shared * sigmoid(shared_gate)): a MoE block's output and the
    layer's residual add in one kernel."""
    return residual + (experts + shared * mx.sigmoid(shared_gate))


def residual_norm(kernels, x: mx.array, r: mx.array, norm) -> tuple[mx.array, mx.array]:
    """(h = x + r, norm(h)): a layer's residual add and the RMSNorm after it, one launch
    where the kernel set has kernels/add_rms_norm for it, else the add and the norm.
    x, r [N, D]; norm an nn.RMSNorm."""
    out = kernels.add_rms_norm(x, r, norm.weight, norm.eps)
    if out is not None:
        return out
    h = x + r
    return h, norm(h)


def carried_norm(kernels, x: mx.array, pending: mx.array | None, norm) -> tuple[mx.array, mx.array]:
    """A layer's input norm, adding the previous layer's carried MLP output first when there
    is one (residual_norm: one launch with kernels/add_rms_norm) -> (stream, normed)."""
    if pending is None:
        return x, norm(x)
    return residual_norm(kernels, x, pending, norm)
