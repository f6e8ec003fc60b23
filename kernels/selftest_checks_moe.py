"""The self-test's checks of the MoE kernels (moe_route, moe_experts, moe_grouped,
moe_block), each as the model launches it; selftest_checks.py holds the rest and the
table selftest.py runs."""
from __future__ import annotations

from dataclasses import replace

import mlx.core as mx

import kernels.moe_block as mb
import kernels.moe_experts as me
import kernels.moe_grouped as mg
import kernels.moe_route as mr
from kernels.selftest_errors import abs_err, err_past_bf16


def check_route(backend: str) -> float:
    logits = mx.random.normal((5, 64), key=mx.random.key(4))
    idx, w = mr.kernel(logits, 4, True, backend=backend)
    ridx, rw = mr.reference(logits, 4, True)
    return float((idx != ridx).any().item()) + abs_err(w, rw)


def random_experts(key, E: int, D: int, hidden: int, group_size: int, pad: int = 0):
    """4-bit experts as the loader makes them: joined gate+up (pad zero rows after) and down."""
    ks = mx.random.split(key, 2)
    gu = mx.random.normal((E, 2 * hidden + pad, D), key=ks[0]) * D**-0.5
    gu[:, 2 * hidden:] = 0.0
    dn = mx.random.normal((E, D, hidden), key=ks[1]) * hidden**-0.5
    return me.QuantExperts(tuple(mx.quantize(gu.astype(mx.bfloat16), group_size, 4)),
                           tuple(mx.quantize(dn.astype(mx.bfloat16), group_size, 4)),
                           hidden, group_size)


def check_experts(backend: str) -> float:
    """float32 routed experts, and the model's bf16 launch: routed + shared expert +
    residual, against the unrounded result past the output's bf16 rounding."""
    ks = mx.random.split(mx.random.key(5), 5)
    N, E, K, D, hidden = 3, 8, 4, 256, 256        # K * hidden / 32 = 32 chunks: every lane
    experts = random_experts(ks[0], E, D, hidden, 64, pad=128)
    one = random_experts(ks[3], 1, D, hidden, 64, pad=128)
    shared = me.QuantExperts(experts.gate_up, experts.down, hidden, 64,
                             shared=(tuple(a[0] for a in one.gate_up),
                                     tuple(a[0] for a in one.down)))
    idx = mx.array([[7, 0, 3, 5], [1, 2, 6, 4], [5, 3, 0, 7]], dtype=mx.uint32)
    router = mx.random.normal((N, K + 1), key=ks[2])         # the gate a strided column
    scores, gate = 0.1 * mx.softmax(router[:, :K], axis=-1), router[:, K:] - 3.0
    x = mx.random.normal((N, D), key=ks[1])
    residual = 0.05 * mx.random.normal((N, D), key=ks[4])
    err = abs_err(me.kernel(x, idx, scores, experts, backend=backend),
               me.reference(x, idx, scores, experts))
    bf = [a.astype(mx.bfloat16) for a in (x, scores, gate, residual)]
    f32 = [a.astype(mx.float32) for a in bf]                  # the unrounded result
    want = me.reference(f32[0], idx, f32[1], shared, f32[2], f32[3])
    got = me.kernel(bf[0], idx, bf[1], shared, bf[2], bf[3], backend=backend)
    return max(err, err_past_bf16(got, want))


def check_grouped(backend: str) -> float:
    """A chunk's pairs grouped by expert: 13 tokens x 4 of 16 experts, one expert never
    chosen (its blocks find no pair) and one chosen by most tokens; float32, and bf16
    against the unrounded result past the output's bf16 rounding."""
    ks = mx.random.split(mx.random.key(17), 4)
    N, E, K, D, hidden = 13, 16, 4, 256, 128
    experts = random_experts(ks[0], E, D, hidden, 64, pad=32)
    picks = mx.argsort(mx.random.uniform(shape=(N, E), key=ks[1]), axis=-1)
    picks = mx.where(picks == 5, 15, picks)                      # expert 5: no pair
    idx = mx.concatenate([mx.full((N, 1), 3, mx.int32),          # expert 3: every token
                          mx.where(picks[:, :K - 1] == 3, 14, picks[:, :K - 1])], axis=1)
    scores = mx.softmax(mx.random.normal((N, K), key=ks[2]), axis=-1)
    x = mx.random.normal((N, D), key=ks[3])
    err = abs_err(mg.kernel(x, idx, scores, experts, backend=backend),
               mg.reference(x, idx, scores, experts))
    xb = x.astype(mx.bfloat16)
    want = mg.reference(xb.astype(mx.float32), idx, scores, experts)
    return max(err, err_past_bf16(mg.kernel(xb, idx, scores, experts, backend=backend), want))


def check_block(backend: str) -> float:
    """The model's launch of moe_block (bf16; the logits and the shared gate columns of one
    joined router row; padding rows; shared expert and residual): against the unrounded
    float32 reference past the bf16 rounding on distinct logits, and on logits full of
    exact ties against moe_route's kernel then moe_experts' (bit for bit on CUDA; past a
    rounding, so a Metal compiler's reassociation is no failure: a wrong pick is O(1))."""
    ks = mx.random.split(mx.random.key(13), 6)
    N, E, K, D, hidden = 3, 64, 4, 256, 256
    one = random_experts(ks[1], 1, D, hidden, 64, pad=128)
    experts = replace(random_experts(ks[0], E, D, hidden, 64, pad=128),
                      shared=(tuple(a[0] for a in one.gate_up), tuple(a[0] for a in one.down)))
    perm = mx.argsort(mx.random.uniform(shape=(N, E), key=ks[2]), axis=-1)
    tied = mx.round(2.0 * mx.random.normal((N, E), key=ks[3])) / 2.0     # halves: ties
    x = mx.random.normal((N, D), key=ks[4]).astype(mx.bfloat16)
    residual = (0.05 * mx.random.normal((N, D), key=ks[5])).astype(mx.bfloat16)
    rows = mx.array([0, 1, 0], dtype=mx.int32)                           # row 2: padding
    err = 0.0
    for logits in (perm.astype(mx.float32) * (4.0 / E) - 2.0, tied):   # distinct in bf16
        joined = mx.concatenate([logits, mx.ones((N, 1)), mx.zeros((N, 7))], axis=1)
        joined = joined.astype(mx.bfloat16)
        # as the model launches it: the joined row unsplit, the gate its column E (SGC)
        got = mb.kernel(x, joined, K, True, experts, joined, residual, rows, backend=backend,
                        shared_gate_col=E)
        if logits is tied:
            idx, w = mr.kernel(joined[:, :E], K, True, backend=backend)
            two = me.kernel(x, idx[rows], w[rows], experts, joined[:, E:E + 1], residual,
                            backend=backend)
            err = max(err, err_past_bf16(got, two.astype(mx.float32)))
        else:
            f32 = [a.astype(mx.float32) for a in (x, joined)]
            want = mb.reference(f32[0], f32[1], K, True, experts, f32[1],
                                residual.astype(mx.float32), rows, shared_gate_col=E)
            err = max(err, err_past_bf16(got, want))
    return err
