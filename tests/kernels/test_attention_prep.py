"""Decode's attention prep kernel (kernels/attention_prep.py: q/k norms, rotary, K/V into
the pools in place) and the gated paged attention against independent float64 numpy
references, and the gated attention layer's use of both against its plain path."""
import math

import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import numpy as np
import pytest
from kernel_numpy_ref import close, to_np

import kernels.attention_prep as ap
import kernels.paged_attention as pa
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

# (B, Hq, Hkv, D, rotary_dim, pool rows): the real layout (16:2 heads of 256, 64 rotary
# dims) at B=1, several rows, rotary over the whole head, a small head
GRID = [(1, 16, 2, 256, 64, 12), (3, 4, 2, 64, 16, 20), (2, 2, 2, 32, 32, 9),
        (4, 8, 1, 128, 32, 17)]
DTYPES = [mx.float32, mx.bfloat16]
EPS, BASE = 1e-6, 1e7


def _make(seed, B, Hq, Hkv, D, rd, R, dtype):
    """The joined projection's views (q with its gate per head: QH = 2D), weights, row
    positions < 40, unique pool rows out of order, pools."""
    rng = np.random.default_rng(seed)
    joined = mx.array(rng.standard_normal((B, Hq * 2 * D + 2 * Hkv * D + 16)), dtype)
    q = joined[:, :Hq * 2 * D]
    k = joined[:, Hq * 2 * D:Hq * 2 * D + Hkv * D]
    v = joined[:, Hq * 2 * D + Hkv * D:Hq * 2 * D + 2 * Hkv * D]
    qw, kw = (mx.array(1 + 0.1 * rng.standard_normal(D), dtype) for _ in range(2))
    offsets = mx.array(rng.integers(0, MAX_POS, B), mx.int32)
    slots = mx.array(rng.permutation(R)[:B], mx.int32)
    k_pool, v_pool = (mx.array(rng.standard_normal((R, Hkv, D)), dtype) for _ in range(2))
    mx.eval(k_pool, v_pool)
    return (q, k, v, qw, kw, EPS, offsets, slots, k_pool, v_pool, (Hq, Hkv, D, 2 * D), rd, BASE)


def numpy_prep(q, k, v, qw, kw, eps, offsets, slots, k_pool, v_pool, heads, rd, base):
    """float64: per head RMSNorm * weight, then rotate pairs (i, i + rd/2) by pos/base**(2i/rd)."""
    Hq, Hkv, D, QH = heads
    B = q.shape[0]
    pos = to_np(offsets).astype(np.float64)

    def norm_rope(x, w):                                       # [B, H, D]
        if w is not None:                                      # None: no norms (NORM=0)
            x = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * to_np(w)
        half = rd // 2
        theta = pos[:, None, None] * base ** (-np.arange(half) / half)
        x1, x2 = x[..., :half], x[..., half:rd]
        return np.concatenate([x1 * np.cos(theta) - x2 * np.sin(theta),
                               x1 * np.sin(theta) + x2 * np.cos(theta), x[..., rd:]], -1)
    qh = to_np(q).astype(np.float64).reshape(B, Hq, QH)[..., :D]
    kh = to_np(k).astype(np.float64).reshape(B, Hkv, D)
    return norm_rope(qh, qw), norm_rope(kh, kw), to_np(v).astype(np.float64).reshape(B, Hkv, D)


MAX_POS = 40          # positions in _make are below this


def _close(got, want, dtype) -> bool:
    """Each output to float32 rounding (bf16: its own rounding), plus what float32 angles
    cost: theta = p * inv_freq is off by up to ~3 ulps of theta (inv_freq's exp2 within 2
    ulps, the product's rounding), <= 3 p 2**-23 rad, and cos/sin by 2 ulps; an output
    of a rotated pair moves by |pair| times that (|pair| <= sqrt(2) max|x|)."""
    rtol, atol = (2.0 ** -8, 1e-6) if dtype == mx.bfloat16 else (1e-5, 1e-6)
    scale = max(float(np.abs(w).max()) for w in want)
    angle = math.sqrt(2) * scale * (3 * MAX_POS * 2.0 ** -23 + 2.0 ** -22)
    return all(close(to_np(g), w, atol + angle, rtol) for g, w in zip(got, want))


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, dtype, cpu_stream):
    args = _make(0, *case, dtype)
    got = ap.reference(*args)
    assert got[0].dtype == dtype and _close(got, numpy_prep(*args), dtype)


def test_reference_rope_is_mx_fast_rope(cpu_stream):
    """The reference's rotary equals MLX's own (the model's plain path) at these positions."""
    x = mx.random.normal((3, 4, 64), key=mx.random.key(0))
    pos = mx.array([0, 7, 33], mx.int32)
    want = mx.fast.rope(x[:, :, None], 16, traditional=False, base=BASE, scale=1.0,
                        offset=pos)[:, :, 0]
    assert close(to_np(ap.rope(x, pos, 16, BASE)), to_np(want), 1e-5, 1e-5)


@pytest.mark.parametrize("case", GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy_and_writes_only_its_rows(backend, case, dtype):
    args = _make(1, *case, dtype)
    want = numpy_prep(*args)
    k_pool, v_pool, slots = args[8], args[9], to_np(args[7])
    before = [to_np(p).copy() for p in (k_pool, v_pool)]
    q = ap.kernel(*args, backend=backend)
    mx.eval(q)
    assert _close((q, k_pool[args[7]], v_pool[args[7]]), want, dtype)
    others = np.setdiff1d(np.arange(k_pool.shape[0]), slots)
    for pool, old in zip((k_pool, v_pool), before):
        assert np.array_equal(to_np(pool)[others], old[others])


def _without_norms(args):
    args = list(args)
    args[3] = args[4] = None
    return args


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_norms_the_reference_only_ropes(dtype, cpu_stream):
    """The llama family's attention (no q/k norms): rotary and the K/V writes only."""
    args = _without_norms(_make(0, *GRID[1], dtype))
    assert _close(ap.reference(*args), numpy_prep(*args), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_norms_the_kernel_only_ropes(backend, dtype):
    args = _without_norms(_make(1, *GRID[1], dtype))
    want = numpy_prep(*args)
    q = ap.kernel(*args, backend=backend)
    mx.eval(q)
    assert _close((q, args[8][args[7]], args[9][args[7]]), want, dtype)


def _joined_args(args):
    """q, k, v as one joined row [B, Hq*QH + 2*Hkv*D + 5] (q first), with k's and v's
    columns: the models' launch (no Split node)."""
    q, k, v = args[:3]
    joined = mx.concatenate([q, k, v, mx.zeros((q.shape[0], 5), q.dtype)], axis=1)
    columns = (q.shape[1], q.shape[1] + k.shape[1])
    return [joined, joined, joined, *args[3:]], columns


def test_k_and_v_read_as_columns_of_the_joined_row_as_the_views(backend):
    args = _make(1, *GRID[1], mx.bfloat16)
    want = numpy_prep(*args)
    joined, columns = _joined_args(args)
    q = ap.kernel(*joined, backend=backend, kv_columns=columns)
    mx.eval(q)
    assert _close((q, args[8][args[7]], args[9][args[7]]), want, mx.bfloat16)


def test_the_reference_reads_the_columns_as_the_views(cpu_stream):
    args = _make(0, *GRID[1], mx.float32)
    joined, columns = _joined_args(args)
    got, want = ap.reference(*joined, kv_columns=columns), ap.reference(*args)
    assert all(np.array_equal(to_np(g), to_np(w)) for g, w in zip(got, want))
    q, k, v, qw, kw, _, _, _, k_pool, v_pool, heads, rd, _ = joined
    assert ap.applies(q, k, v, qw, kw, k_pool, v_pool, heads, rd, columns)
    past = (columns[0], q.shape[1] - heads[1] * heads[2] + 1)          # v past the end
    assert not ap.applies(q, k, v, qw, kw, k_pool, v_pool, heads, rd, past)
    inside_q = (columns[0] - 1, columns[1])                             # k inside q's columns
    assert not ap.applies(q, k, v, qw, kw, k_pool, v_pool, heads, rd, inside_q)


def test_norms_both_or_neither():
    q, k, v, qw, kw, _, _, _, k_pool, v_pool, heads, rd, _ = _make(0, *GRID[1], mx.float32)
    assert ap.applies(q, k, v, qw, kw, k_pool, v_pool, heads, rd)
    assert ap.applies(q, k, v, None, None, k_pool, v_pool, heads, rd)
    assert not ap.applies(q, k, v, qw, None, k_pool, v_pool, heads, rd)
    assert not ap.applies(q, k, v, None, kw, k_pool, v_pool, heads, rd)


def test_planted_fault_is_caught(cpu_stream):
    args = list(_make(2, *GRID[1], mx.float32))
    want = numpy_prep(*args)
    assert _close(ap.reference(*args), want, mx.float32)
    args[6] = args[6] + 1                                # every row one position off
    assert not _close(ap.reference(*args), want, mx.float32)


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(ap, "kernel", refuse)
    args = list(_make(3, *GRID[1], mx.float32))
    assert NO_KERNELS.attention_prep(*args) is None
    bad = list(args)
    bad[11] = 65                                          # rotary dims past the head
    assert KernelSet("cuda").attention_prep(*bad) is None
    bad = list(args)
    bad[1] = args[1].astype(mx.bfloat16)                  # k's dtype differs from q's
    assert KernelSet("cuda").attention_prep(*bad) is None


def test_one_launch():
    args = _make(4, *GRID[1], mx.float32)
    with gpu_graph() as ledger:
        q, pools = KernelSet(COUNT).attention_prep(*args)
    assert ledger.calls == {"attention_prep": 1} and q.shape == (3, 4, 64) and len(pools) == 2


# -- the output gate inside the paged attention's second pass --

def _paged(seed, dtype):
    rng = np.random.default_rng(seed)
    B, Hq, Hkv, D, ps, P = 3, 8, 2, 64, 4, 4
    q = mx.array(rng.standard_normal((B, Hq, D)), dtype)
    kp, vp = (mx.array(rng.standard_normal((20 * ps, Hkv, D)), dtype) for _ in range(2))
    tables = mx.array((rng.permutation(19)[:B * P] + 1).reshape(B, P), mx.int32)
    lens = mx.array([5, 16, 1], mx.int32)
    wide = mx.array(rng.standard_normal((B, Hq, 2 * D)), dtype)
    gate = wide[..., D:]                                  # as the layer slices its q_proj
    return (q, kp, vp, tables, lens, ps, D ** -0.5), gate


def _numpy_gated(args, gate):
    q, kp, vp, tables, lens, ps, scale = args
    out = numpy_ref.paged_attention(to_np(q), to_np(kp), to_np(vp), to_np(tables),
                                    to_np(lens), ps, scale)
    return out / (1 + np.exp(-to_np(gate).astype(np.float64)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_paged_reference_matches_numpy(dtype, cpu_stream):
    args, gate = _paged(5, dtype)
    rtol, atol = (1e-2, 2e-2) if dtype == mx.bfloat16 else (1e-4, 2e-5)
    assert close(to_np(pa.reference(*args, gate=gate)), _numpy_gated(args, gate), atol, rtol)
    assert not close(to_np(pa.reference(*args)), _numpy_gated(args, gate), atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kps", [8, None])
def test_gated_paged_kernel_matches_numpy(backend, dtype, kps):
    args, gate = _paged(6, dtype)
    rtol, atol = (1e-2, 2e-2) if dtype == mx.bfloat16 else (1e-4, 2e-5)
    out = pa.kernel(*args, backend=backend, kps=kps, gate=gate)
    assert close(to_np(out), _numpy_gated(args, gate), atol, rtol)


# -- the layer --

class _AttentionByReference(KernelSet):
    """The two kernels' contracts on any machine: their references, the K/V rows
    scattered into the pools."""
    calls = []

    def attention_prep(self, q, k, v, q_norm, k_norm, eps, offsets, slots, k_pool, v_pool,
                       heads, rotary_dim, base, kv_columns=None):
        if self.prep_launches(q, k, v, q_norm, k_norm, k_pool, v_pool, heads,
                              rotary_dim, kv_columns) is None:
            return None
        self.calls.append("prep")
        qh, krows, vrows = ap.reference(q, k, v, q_norm, k_norm, eps, offsets, slots,
                                        k_pool, v_pool, heads, rotary_dim, base, kv_columns)
        k_pool, v_pool = mx.array(k_pool), mx.array(v_pool)
        k_pool[slots] = krows
        v_pool[slots] = vrows
        return qh, (k_pool, v_pool)

    def paged_decode_attention(self, q, k_pool, v_pool, block_tables, context_lens,
                               page_size, scale, gate=None, joined=False):
        if not pa.applies(q, k_pool, v_pool, gate):
            return None
        self.calls.append("paged")
        out = pa.reference(q, k_pool, v_pool, block_tables, context_lens, page_size, scale,
                           gate=gate)
        return out.reshape(out.shape[0], -1) if joined else out


def _model(model_type, head_dim):
    from qwen_fixtures import build_model, random_weights, tiny_config
    config = tiny_config(model_type)
    text = config.get("text_config", config)
    text.update(linear_key_head_dim=32, linear_value_head_dim=32, head_dim=head_dim)
    model = build_model(config, random_weights(config, seed=4))
    model.fuse_projections()
    return model


def _through_the_kernels_as_the_plain_path(model, what: str, used: set) -> None:
    """Wiring: decode steps (rows at different positions, one of them new) through the
    kernels' contracts give the plain path's logits and K/V pools (float32 rounding)."""
    from float32_tolerance import assert_close, model_depth
    from qwen_fixtures import Rows

    from engine.models.base import use_kernels
    _AttentionByReference.calls = []
    others = tuple((n, "test") for n in NAMES if n not in (ap.NAME, pa.NAME))
    runs = {}
    for name, kernels in (("plain", NO_KERNELS), ("kernel", _AttentionByReference("cuda", others))):
        use_kernels(model, kernels)
        rows = Rows(model)
        for s in (0, 1):
            rows.start(s)
        out = [rows.forward({0: [5, 6, 7, 8, 9, 10], 1: [9, 10]})]
        rows.start(2)
        for step in range(3):       # seq 2 starts with a one-token prompt
            out.append(rows.forward({0: [11 + step], 1: [20 + step], 2: [30 + step]}))
        # The pools past the scratch page 0: the ragged first forward's padding tokens
        # all write there, and which duplicate write lands is unspecified on a GPU (all
        # three cases failed there, head dim 16 too, where both runs take one path).
        runs[name] = ([np.array(o) for o in out], [np.array(a[rows.page_size:])
                                                   for pair in rows.cache.kv for a in pair])
    assert set(_AttentionByReference.calls) == used
    depth = model_depth(model, 6 + 3)
    for i, (got, want) in enumerate(zip(runs["kernel"][0], runs["plain"][0])):
        assert_close(got, want, depth, f"{what} logits of forward {i}")
    for i, (got, want) in enumerate(zip(runs["kernel"][1], runs["plain"][1])):
        assert_close(got, want, depth, f"{what} K/V pool {i}")
    assert math.isfinite(float(np.abs(runs["kernel"][0][-1]).max()))


# head_dim 32: both kernels; 16: the paged kernel declines (D % 32), and so does the
# prep (no reader of its in-place writes would be ordered after them on a GPU)
@pytest.mark.parametrize("model_type,head_dim,used", [
    ("qwen3_5_moe", 32, {"prep", "paged"}), ("qwen3_next", 32, {"prep", "paged"}),
    ("qwen3_5_moe", 16, set())])
def test_the_gated_attention_decodes_through_the_kernels_as_its_plain_path_does(
        model_type, head_dim, used):
    _through_the_kernels_as_the_plain_path(_model(model_type, head_dim), model_type, used)


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_the_llama_family_decodes_through_the_kernels_as_its_plain_path_does(model_type):
    """The built-in model's family (no q/k norms: NORM=0) and Qwen3 (q/k norms, no gate)."""
    from tiny_models import tiny_llama, tiny_llama_config
    model = tiny_llama(tiny_llama_config(model_type, head_dim=32, hidden_size=128))
    model.fuse_projections()
    _through_the_kernels_as_the_plain_path(model, model_type, {"prep", "paged"})
