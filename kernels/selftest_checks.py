"""The self-test's checks: each kernel against its float32 reference on small shapes, as
the model launches it (strided views, bf16, padding rows). Each check returns the error
past the kernel's own roundings; selftest.py runs them and decides what may launch."""
from __future__ import annotations

import mlx.core as mx

import kernels.add_norm_qmv as anq
import kernels.add_rms_norm as arn
import kernels.attention_prep as ap
import kernels.gated_delta_chunk as gdc
import kernels.gated_delta_step as gds
import kernels.gated_delta_step_norm as gdsn
import kernels.gated_rms_norm as grn
import kernels.gdn_conv_chunk as gcc
import kernels.gdn_conv_step as gcs
import kernels.paged_attention as pa
import kernels.qmm_rows as qr
import kernels.qmv_normed as qn
import kernels.swiglu_joined as sj
from kernels.selftest_checks_moe import check_block, check_experts, check_grouped, check_route
from kernels.selftest_checks_sampling import check_cdf_draw, check_top_p_cut
from kernels.selftest_errors import abs_err, err_past_bf16

TOL = 2e-3  # float32 math on bf16 inputs; a wrong index or race is off by O(1)


def _gdn_inputs(key, B, T, Hk, Hv, D, S, dtype):
    ks = mx.random.split(key, 6)
    shp = (B, T) if T else (B,)
    q = mx.random.normal(shp + (Hk, D), key=ks[0]) / D**0.5
    k = mx.random.normal(shp + (Hk, D), key=ks[1]) / D**0.5
    v = mx.random.normal(shp + (Hv, D), key=ks[2])
    g = mx.random.uniform(0.6, 1.0, shp + (Hv,), key=ks[3])
    beta = mx.random.uniform(0.0, 1.0, shp + (Hv,), key=ks[4])
    pool = mx.random.normal((S, Hv, D, D), key=ks[5]) * 0.1
    slots = mx.array([(3 * i + 1) % S for i in range(B)], dtype=mx.int32)   # out of order
    fresh = mx.array([i % 3 == 2 for i in range(B)])
    return q.astype(dtype), k.astype(dtype), v.astype(dtype), g, beta, pool, slots, fresh


def check_step(backend: str) -> float:
    args = _gdn_inputs(mx.random.key(1), 3, 0, 2, 4, 32, 5, mx.bfloat16)
    ry, rrows = gds.reference(*args)
    mx.eval(ry, rrows)                       # before the kernel rewrites the pool in place
    y = gds.kernel(*args, backend=backend)
    mx.eval(y)
    pool, slots = args[5], args[6]
    return max(abs_err(y, ry), abs_err(pool[slots], rrows))


def check_step_raw_gates(backend: str) -> float:
    """The model's launch: raw a, b (columns of one projection row) and q/k/v as views."""
    q, k, v, _, _, pool, slots, fresh = _gdn_inputs(mx.random.key(7), 3, 0, 2, 4, 32, 5,
                                                    mx.bfloat16)
    ks = mx.random.split(mx.random.key(8), 3)
    ab = (2.0 * mx.random.normal((3, 11), key=ks[0])).astype(mx.bfloat16)
    a, b = ab[:, 1:5], ab[:, 6:10]
    decay = (mx.random.uniform(0.0, 2.5, (4,), key=ks[1]),
             mx.random.normal((4,), key=ks[2]).astype(mx.bfloat16))
    qs, ks_, vs = (mx.concatenate([x, x], axis=-1)[..., 16:48] for x in (q, k, v))
    # y against the unrounded float32 result (q in float32: the same values), past its
    # bf16 rounding: the kernel's gates round apart from the reference's
    ry, rrows = gds.reference(qs.astype(mx.float32), ks_, vs, a, b, pool, slots, fresh,
                              decay=decay)
    mx.eval(ry, rrows)                       # before the kernel rewrites the pool in place
    y = gds.kernel(qs, ks_, vs, a, b, pool, slots, fresh, backend=backend, decay=decay)
    mx.eval(y)
    return max(err_past_bf16(y, ry), abs_err(pool[slots], rrows))


def check_step_norm(backend: str) -> float:
    """The model's launch (raw a, b and z read as columns of one joined projection row;
    q/k/v strided views; the output declared [B, Hv*Dv]; bf16) at the real head size
    (D = 128: blocks of 1024 threads, two rows a thread; at 16 rows on CUDA 512 threads,
    eight rows a thread: gdsn.WIDE_LAYOUT), then float32 at D = 32 (one row a thread);
    against the unrounded float32 result past the output's rounding."""
    err = 0.0
    for D, dtype, seed, B, S in ((128, mx.bfloat16, 13, 3, 5), (128, mx.bfloat16, 15, 16, 17),
                                 (32, mx.float32, 14, 3, 5)):
        q, k, v, _, _, pool, slots, fresh = _gdn_inputs(mx.random.key(seed), B, 0, 1, 2, D, S,
                                                        dtype)
        ks = mx.random.split(mx.random.key(seed + 100), 5)
        # one projection row: 8 columns of qkv's stand-in, z (2 heads of D), b, a, 4 more
        proj = (2.0 * mx.random.normal((B, 2 * D + 16), key=ks[0])).astype(dtype)
        columns = (8, 8 + 2 * D, 10 + 2 * D)                           # z's, b's, a's
        decay = (mx.random.uniform(0.0, 2.5, (2,), key=ks[1]),
                 mx.random.normal((2,), key=ks[2]).astype(dtype))
        w = (1.0 + 0.1 * mx.random.normal((D,), key=ks[4])).astype(dtype)
        qs, ks_, vs = (mx.concatenate([x, x], axis=-1)[..., D // 2:D // 2 + D] for x in (q, k, v))
        want, rows = gdsn.reference(qs.astype(mx.float32), ks_, vs, proj, proj, pool, slots,
                                    proj, w, 1e-6, fresh, decay=decay, columns=columns)
        mx.eval(want, rows)                  # before the kernel rewrites the pool in place
        out = gdsn.kernel(qs, ks_, vs, proj, proj, pool, slots, proj, w, 1e-6, fresh,
                          backend=backend, decay=decay, joined=True,
                          columns=columns).reshape(want.shape)
        mx.eval(out)
        err = max(err, err_past_bf16(out, want), abs_err(pool[slots], rows))
    return err


def check_chunk(backend: str) -> float:
    q, k, v, g, beta, pool, slots, fresh = _gdn_inputs(mx.random.key(2), 3, 5, 2, 4, 32, 4,
                                                       mx.bfloat16)
    lens = mx.array([5, 1, 3], dtype=mx.int32)
    args = (q, k, v, g, beta, pool, slots, lens, fresh)
    ry, rrows = gdc.reference(*args)
    mx.eval(ry, rrows)                       # before the kernel rewrites the pool in place
    y = gdc.kernel(*args, backend=backend)
    mx.eval(y)
    return max(abs_err(y, ry), abs_err(pool[slots], rrows), _check_chunk_raw_gates(backend))


def _check_chunk_raw_gates(backend: str) -> float:
    """The model's launch: raw a, b (columns of one projection row) and q/k/v as views."""
    q, k, v, _, _, pool, slots, fresh = _gdn_inputs(mx.random.key(9), 3, 5, 2, 4, 32, 4,
                                                    mx.bfloat16)
    ks = mx.random.split(mx.random.key(10), 3)
    ab = (2.0 * mx.random.normal((3, 5, 11), key=ks[0])).astype(mx.bfloat16)
    a, b = ab[..., 1:5], ab[..., 6:10]
    decay = (mx.random.uniform(0.0, 2.5, (4,), key=ks[1]),
             mx.random.normal((4,), key=ks[2]).astype(mx.bfloat16))
    qs, ks_, vs = (mx.concatenate([x, x], axis=-1)[..., 16:48] for x in (q, k, v))
    lens = mx.array([5, 2, 4], dtype=mx.int32)
    # y against the unrounded float32 result past its bf16 rounding (the kernel's gates
    # round apart from the reference's)
    ry, rrows = gdc.reference(qs.astype(mx.float32), ks_, vs, a, b, pool, slots, lens, fresh,
                              decay=decay)
    mx.eval(ry, rrows)                       # before the kernel rewrites the pool in place
    y = gdc.kernel(qs, ks_, vs, a, b, pool, slots, lens, fresh, backend=backend, decay=decay)
    mx.eval(y)
    return max(err_past_bf16(y, ry), abs_err(pool[slots], rrows))


def check_paged(backend: str) -> float:
    ks = mx.random.split(mx.random.key(3), 3)
    B, Hq, Hkv, D, ps, pages = 3, 4, 2, 64, 4, 10
    q = mx.random.normal((B, Hq, D), key=ks[0]).astype(mx.bfloat16)
    kp = mx.random.normal((pages * ps, Hkv, D), key=ks[1]).astype(mx.bfloat16)
    vp = mx.random.normal((pages * ps, Hkv, D), key=ks[2]).astype(mx.bfloat16)
    bt = mx.array([[7, 2, 9], [1, 0, 0], [4, 8, 3]], dtype=mx.int32)
    lens = mx.array([11, 3, 12], dtype=mx.int32)
    args = (q, kp, vp, bt, lens, ps, D**-0.5)
    # the gated layer's launch: the gate read from the joined q+gate projection (GATED=2,
    # the second half of each head), the output declared [B, Hq*D]; and as a strided view
    qg = mx.random.normal((B, Hq * 2 * D), key=mx.random.key(31)).astype(mx.bfloat16)
    gate = qg.reshape(B, Hq, 2 * D)[..., D:]
    exact = pa.reference(q.astype(mx.float32), *args[1:], gate=gate)   # unrounded
    joined = pa.kernel(*args, backend=backend, kps=8, gate=qg, joined=True)
    return max(abs_err(pa.kernel(*args, backend=backend, kps=8), pa.reference(*args)),
               err_past_bf16(pa.kernel(*args, backend=backend, kps=8, gate=gate), exact),
               err_past_bf16(joined.reshape(B, Hq, D), exact))


def check_conv(backend: str) -> float:
    heads = (1, 2, 128, 32)           # Hk, Hv, Dk, Dv: C = 320; Dk 128 as in the models
    ks = mx.random.split(mx.random.key(6), 3)
    C, S = 320, 5
    qkv = mx.random.normal((3, 1, C + 64), key=ks[0]).astype(mx.bfloat16)[..., 32:32 + C]
    weight = mx.random.normal((C, 4, 1), key=ks[1]) * 0.5
    pool = mx.random.normal((S, 3, C), key=ks[2]).astype(mx.bfloat16)
    slots = mx.array([4, 0, 2], dtype=mx.int32)
    fresh = mx.array([False, True, False])
    # Against the unrounded float32 result; the new states are exact copies of inputs.
    (rq, rk, rv), rows = gcs.reference(qkv.astype(mx.float32), weight, pool, slots, fresh,
                                       heads, 1e-6)
    mx.eval(rq, rk, rv, rows)                # before the kernel rewrites the pool in place
    q, k, v = gcs.kernel(qkv, weight, pool, slots, fresh, heads, 1e-6, backend=backend)
    mx.eval(q, k, v)
    return max(err_past_bf16(q, rq), err_past_bf16(k, rk), err_past_bf16(v, rv),
               abs_err(pool[slots], rows))


def check_conv_chunk(backend: str) -> float:
    """The model's chunk launch: a strided bf16 qkv, rows of different lengths (one past a
    tile, one shorter than the conv's window), a fresh row; against the unrounded float32
    result past the outputs' rounding; the new states are exact copies of inputs."""
    heads = (1, 2, 128, 32)           # Hk, Hv, Dk, Dv: C = 320; Dk 128 as in the models
    ks = mx.random.split(mx.random.key(16), 3)
    C, S, T = 320, 5, gcc.TT + 5
    qkv = mx.random.normal((3, T, C + 64), key=ks[0]).astype(mx.bfloat16)[..., 32:32 + C]
    weight = mx.random.normal((C, 4, 1), key=ks[1]) * 0.5
    pool = mx.random.normal((S, 3, C), key=ks[2]).astype(mx.bfloat16)
    slots = mx.array([4, 0, 2], dtype=mx.int32)
    fresh = mx.array([False, True, False])
    lens = mx.array([T, 7, 2], dtype=mx.int32)
    (rq, rk, rv), rows = gcc.reference(qkv.astype(mx.float32), weight, pool, slots, fresh,
                                       lens, heads, 1e-6)
    mx.eval(rq, rk, rv, rows)                # before the kernel rewrites the pool in place
    q, k, v = gcc.kernel(qkv, weight, pool, slots, fresh, lens, heads, 1e-6, backend=backend)
    mx.eval(q, k, v)
    return max(err_past_bf16(q, rq), err_past_bf16(k, rk), err_past_bf16(v, rv),
               abs_err(pool[slots], rows))


def check_add_rms_norm(backend: str) -> float:
    """bf16 rows (r a strided view, D not a multiple of the block) and a float32 launch."""
    ks = mx.random.split(mx.random.key(9), 3)
    x = mx.random.normal((3, 200), key=ks[0]).astype(mx.bfloat16)
    r = mx.random.normal((3, 232), key=ks[1]).astype(mx.bfloat16)[:, 16:216]
    w = (1.0 + 0.1 * mx.random.normal((200,), key=ks[2])).astype(mx.bfloat16)
    err = 0.0
    for args in ((x, r, w), tuple(a.astype(mx.float32) for a in (x, r, w))):
        rh, _ = arn.reference(*args, 1e-6)         # h: the same rounding both ways
        # y: from the rounded h, unrounded (float32), against the kernel's past its rounding
        exact = arn.reference(rh.astype(mx.float32), mx.zeros(rh.shape), w.astype(mx.float32),
                              1e-6)[1]
        h, y = arn.kernel(*args, 1e-6, backend=backend)
        err = max(err, abs_err(h, rh), err_past_bf16(y, exact))
    return err


def check_swiglu_joined(backend: str) -> float:
    """bf16 rows of a joined gate_up output with padding after up (I=200: no block
    divides it), and a float32 launch."""
    a = mx.random.normal((3, 2 * 200 + 24), key=mx.random.key(14)) * 3
    err = 0.0
    for x in (a.astype(mx.bfloat16), a):
        exact = sj.reference(x.astype(mx.float32), 200, 200)
        err = max(err, err_past_bf16(sj.kernel(x, 200, 200, backend=backend), exact))
    return err


def check_gated_rms_norm(backend: str) -> float:
    """bf16 heads (z a strided view of a wider row, y dense; D=96: three lanes' loops),
    and a float32 launch."""
    ks = mx.random.split(mx.random.key(10), 3)
    y = mx.random.normal((2, 3, 4, 96), key=ks[0]).astype(mx.bfloat16)
    z = mx.random.normal((2, 3, 4 * 96 + 40), key=ks[1]).astype(mx.bfloat16)
    z = z[..., 8:8 + 4 * 96].reshape(2, 3, 4, 96)
    w = (1.0 + 0.1 * mx.random.normal((96,), key=ks[2])).astype(mx.bfloat16)
    err = 0.0
    for args in ((y, z, w), tuple(a.astype(mx.float32) for a in (y, z, w))):
        exact = grn.reference(*(a.astype(mx.float32) for a in args), 1e-6)
        err = max(err, err_past_bf16(grn.kernel(*args, 1e-6, backend=backend), exact))
    return err


def check_attention_prep(backend: str) -> float:
    """bf16 views of one joined projection row (q with its gate per head), pools written at
    out-of-order rows, with q/k norms and without; against the unrounded float32 result
    past the outputs' rounding."""
    B, Hq, Hkv, D, rd, R = 3, 4, 2, 64, 16, 9
    heads = (Hq, Hkv, D, 2 * D)
    ks = mx.random.split(mx.random.key(11), 4)
    joined = mx.random.normal((B, Hq * 2 * D + 2 * Hkv * D + 8), key=ks[0]).astype(mx.bfloat16)
    q, k = joined[:, :Hq * 2 * D], joined[:, Hq * 2 * D:Hq * 2 * D + Hkv * D]
    v = joined[:, Hq * 2 * D + Hkv * D:Hq * 2 * D + 2 * Hkv * D]
    qw, kw = (1.0 + 0.1 * mx.random.normal((2, D), key=ks[1])).astype(mx.bfloat16)
    offsets = mx.array([3, 0, 37], dtype=mx.int32)
    slots = mx.array([7, 2, 5], dtype=mx.int32)
    k_pool, v_pool = mx.random.normal((2, R, Hkv, D), key=ks[2]).astype(mx.bfloat16)
    mx.eval(k_pool, v_pool)
    f32 = [a.astype(mx.float32) for a in (q, k, v, qw, kw)]
    pools32 = [mx.zeros((1, Hkv, D), mx.float32)] * 2
    err = 0.0
    # with q/k norms (Qwen3.5's gated attention), then without (NORM=0: the llama family);
    # k and v read as columns of the joined row, as the models launch it
    columns = (Hq * 2 * D, Hq * 2 * D + Hkv * D)
    for norms, norms32 in (((qw, kw), f32[3:5]), ((None, None), (None, None))):
        want = ap.reference(*f32[:3], *norms32, 1e-6, offsets, slots, *pools32, heads, rd,
                            1e7)
        mx.eval(want)
        got = ap.kernel(joined, joined, joined, *norms, 1e-6, offsets, slots, k_pool, v_pool,
                        heads, rd, 1e7, backend=backend, kv_columns=columns)
        mx.eval(got)
        err = max(err, *(err_past_bf16(g, w)
                         for g, w in zip((got, k_pool[slots], v_pool[slots]), want)))
    return err


def check_qmm_rows(backend: str) -> float:
    """19 rows (two row tiles, the second partial) of a 4-bit and an 8-bit layer, in each
    layout qr.layout picks for some shape (1 tile a warp and K over 8 warps: this one's;
    2 x 8; 4 tiles over 4 warps); the error past the kernel's own roundings, as a share
    of the sum of |terms| (a wrong row, column or group is off by O(1) of it): each
    weight rounded to bf16 and y too, 2**-9 relative each at most."""
    ks = mx.random.split(mx.random.key(13), 2)
    w32 = (mx.random.normal((64, 1024), key=ks[0]) * 1024 ** -0.5).astype(mx.bfloat16)
    x = mx.random.normal((19, 1024), key=ks[1]).astype(mx.bfloat16)
    worst = 0.0
    for bits in qr.BITS:
        w, scales, biases = mx.quantize(w32, group_size=64, bits=bits)
        want = qr.reference(x, w, scales, biases, 64, bits)
        mag = mx.abs(x.astype(mx.float32)) @ mx.abs(mx.dequantize(
            w, scales.astype(mx.float32), biases.astype(mx.float32), 64, bits)).T
        for nt, ksplit in ((None, None), (2, 8), (4, 4)):
            got = qr.kernel(x, w, scales, biases, 64, bits, backend=backend, nt=nt,
                            ksplit=ksplit).astype(mx.float32)
            worst = max(worst, (mx.abs(got - want) / mag).max().item() - 2.0 ** -8)
    return max(0.0, worst)


def check_qmv_normed(backend: str) -> float:
    """One row's norm and a 4-bit and an 8-bit layer of 72 rows (two blocks and a partial
    one: a block takes 32), K over two of a warp's turns; the error past the kernel's own
    roundings, as a share of the sum of |terms| (a wrong row, column or group is off by
    O(1) of it): y rounded to bf16 (2**-8: bf16's unit roundoff), and the norm's elements,
    each of which the sum of squares' order may move by one bf16 ulp (2**-7 of it)."""
    ks = mx.random.split(mx.random.key(15), 3)
    w32 = (mx.random.normal((72, 2048), key=ks[0]) * 2048 ** -0.5).astype(mx.bfloat16)
    x = (mx.random.normal((1, 2048), key=ks[1]) * 3).astype(mx.bfloat16)
    nw = (1.0 + 0.2 * mx.random.normal((2048,), key=ks[2])).astype(mx.bfloat16)
    worst = 0.0
    for bits in qn.BITS:
        w, scales, biases = mx.quantize(w32, group_size=64, bits=bits)
        args = (x, nw, 1e-6, w, scales, biases, 64, bits)
        want, mag = qn.reference(*args), qn.magnitude(*args)
        got = qn.kernel(*args, backend=backend).astype(mx.float32)
        worst = max(worst, (mx.abs(got - want) / mag).max().item() - 2.0 ** -8 - 2.0 ** -7)
    return max(0.0, worst)


def check_add_norm_qmv(backend: str) -> float:
    """One row's add and norm and an 8-bit router-shaped layer of 257 rows (8 full blocks
    of 32 and one row more), K = 2,048, and a 4-bit one of 72; as check_qmv_normed: y's
    error past bf16's rounding (2**-8) and the norm's one ulp (2**-7), as a share of the
    sum of |terms|. h must be the reference's bit for bit (the same add, the same
    rounding), and hn within one bf16 ulp of it (2**-7 of |hn|: the sum of squares'
    order)."""
    ks = mx.random.split(mx.random.key(16), 4)
    x = (mx.random.normal((1, 2048), key=ks[1]) * 3).astype(mx.bfloat16)
    r = (mx.random.normal((1, 2048), key=ks[2]) * 2).astype(mx.bfloat16)
    nw = (1.0 + 0.2 * mx.random.normal((2048,), key=ks[3])).astype(mx.bfloat16)
    worst = 0.0
    for rows, bits in ((257, 8), (72, 4)):     # both launched (the seeding notes each)
        w32 = (mx.random.normal((rows, 2048), key=ks[0]) * 2048 ** -0.5).astype(mx.bfloat16)
        w, scales, biases = mx.quantize(w32, group_size=64, bits=bits)
        args = (x, r, nw, 1e-6, w, scales, biases, 64, bits)
        h_want, hn_want, want = anq.reference(*args)
        h, hn, got = anq.kernel(*args, backend=backend)
        if not mx.array_equal(h, h_want).item():
            worst = 1.0
        hn_f, hn_w = hn.astype(mx.float32), hn_want.astype(mx.float32)
        worst = max(worst, (mx.abs(hn_f - hn_w) / mx.abs(hn_w).max()).max().item() - 2.0 ** -7,
                    (mx.abs(got.astype(mx.float32) - want)
                     / anq.magnitude(*args)).max().item() - 2.0 ** -8 - 2.0 ** -7)
    return max(0.0, worst)


CHECKS = {"gated_delta_step": lambda b: max(check_step(b), check_step_raw_gates(b)),
          "gated_delta_chunk": check_chunk,
          "paged_attention": check_paged, "moe_route": check_route,
          "moe_experts": check_experts, "moe_block": check_block, "gdn_conv_step": check_conv,
          "add_rms_norm": check_add_rms_norm, "gated_rms_norm": check_gated_rms_norm,
          "attention_prep": check_attention_prep, "top_p_cut": check_top_p_cut,
          "gated_delta_step_norm": check_step_norm, "qmm_rows": check_qmm_rows,
          "moe_grouped": check_grouped, "gdn_conv_chunk": check_conv_chunk,
          "swiglu_joined": check_swiglu_joined, "qmv_normed": check_qmv_normed,
          "cdf_draw": check_cdf_draw, "add_norm_qmv": check_add_norm_qmv}
