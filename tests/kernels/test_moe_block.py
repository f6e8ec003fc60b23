"""The MoE block with its routing inside the experts' two launches (kernels/moe_block.py):
against independent float64 numpy references (kernel_numpy_ref's moe_route, then its
moe_experts), and on the GPU against moe_route's kernel then moe_experts' bit for bit.
The CUDA bodies also run on the CPU: python -m kernels.bench.cuda_on_cpu_route."""
from dataclasses import replace
from functools import cache

import kernel_numpy_ref as numpy_ref
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from kernel_numpy_ref import to_np

import kernels.moe_block as mb
import kernels.moe_experts as me
import kernels.moe_route as mr
from engine.bench.profile_ops import ops_by_primitive
from engine.loading import cuda_qmm_guard
from engine.models.elementwise import moe_output
from engine.models.moe import SparseMoeBlock
from kernels.backend import NAMES
from kernels.kernel_set import NO_KERNELS, KernelSet
from kernels.stand_in import COUNT, gpu_graph

# (N, E, k, D, I, group, pad rows): the real router and experts (E 256, top-8, D 2048,
# I 512, group 64, GPU row padding) at B=1 and B=4; a B=16 decode; k=10 (Qwen3-Next's);
# E=1024 (32 experts a lane); k = E = 32; k = 1
GRID = [(1, 256, 8, 2048, 512, 64, 128), (4, 256, 8, 2048, 512, 64, 128),
        (16, 256, 8, 256, 128, 64, 0), (2, 96, 10, 96, 128, 32, 0),
        (2, 1024, 8, 128, 64, 64, 0), (2, 32, 32, 128, 64, 64, 0), (3, 64, 1, 256, 256, 64, 0)]
# (shared expert, residual, normalize, route_rows): the model's launch; the plainest;
# without renormalising; padding rows (row 0's experts)
OPTIONS = [(True, True, True, False), (False, False, True, False), (True, False, False, False),
           (True, True, True, True)]
CASES = [(GRID[0], OPTIONS[0]), (GRID[1], OPTIONS[3])] + [(c, o) for c in GRID[2:4]
                                                           for o in OPTIONS] + [
    (c, OPTIONS[0]) for c in GRID[4:]]
SMALL = [(c, o) for c, o in CASES if c[1] * c[3] * c[4] <= 256 * 256 * 128]
DTYPES = [mx.float32, mx.bfloat16]
ULP32 = 2.0 ** -24


@cache
def _experts(E, D, hidden, group, pad, dtype, seed=0):
    """Random 4-bit words with random scales and biases (at E=256 a float copy to
    quantize would be 2 GB), scales and biases in dtype; and a shared expert alike."""
    rng = np.random.default_rng(seed)

    def part(lead, rows, cols):
        w = mx.array(rng.integers(0, 2 ** 32, (*lead, rows, cols // 8), dtype=np.uint32))
        s = np.abs(rng.standard_normal((*lead, rows, cols // group))) * cols ** -0.5 / 4
        b = -7.5 * s + rng.standard_normal(s.shape) * cols ** -0.5 * 0.1
        return w, mx.array(s, dtype=dtype), mx.array(b, dtype=dtype)
    routed = me.QuantExperts(part((E,), 2 * hidden + pad, D), part((E,), D, hidden), hidden,
                             group)
    return routed, (part((), 2 * hidden + pad, D), part((), D, hidden))


def _logits(rng, N, E, k) -> np.ndarray:
    """Distinct logits (spaced 4/E, exact in bf16) with exact ties planted: across the
    k-th place (row 1), in one lane and across lanes (row 2), coarse (row 3)."""
    out = np.stack([rng.permutation(E) for _ in range(N)]) * (4.0 / E) - 2.0
    for r in range(1, N):
        row, order = out[r], np.argsort(-out[r], kind="stable")
        if r % 4 == 1:
            row[order[max(k - 3, 0):k + 3]] = row[order[min(k, E) - 1]]
        elif r % 4 == 2:
            row[[e for e in (5, 37, 69, 4, 36) if e < E]] = row.max() + 1
        elif r % 4 == 3:
            out[r] = np.round(row)
    return out


def _make(seed, N, E, k, D, hidden, group, pad, dtype, shared=True, residual=True,
          rows=False):
    """(x, logits, experts, shared_gate, residual, route_rows): the logits and the shared
    gate strided views of one joined router output, as the model hands them over."""
    routed, one = _experts(E, D, hidden, group, pad, dtype)
    experts = replace(routed, shared=one) if shared else routed
    rng = np.random.default_rng(seed)
    x = mx.array(rng.standard_normal((N, D)), dtype=dtype)
    wide = np.concatenate([_logits(rng, N, E, k), rng.standard_normal((N, 7))], axis=1)
    wide = mx.array(wide, dtype=dtype)                             # [N, E + 7]
    res = mx.array(rng.standard_normal((N, D)), dtype=dtype) if residual else None
    route_rows = mx.array([n if n % 2 else 0 for n in range(N)], mx.int32) if rows else None
    return x, wide[:, :E], experts, wide[:, E:E + 1] if shared else None, res, route_rows


def _expected(x, logits, k, normalize, experts, shared_gate, residual, route_rows):
    nl = to_np(logits) if route_rows is None else to_np(logits)[to_np(route_rows)]
    idx, w = numpy_ref.moe_route(nl, k, normalize)
    shared = None if experts.shared is None else [[to_np(a) for a in part]
                                                  for part in experts.shared]
    return numpy_ref.moe_experts(to_np(x), idx, w, [to_np(a) for a in experts.gate_up],
                                 [to_np(a) for a in experts.down], experts.hidden, shared,
                                 None if shared_gate is None else to_np(shared_gate),
                                 None if residual is None else to_np(residual))


def _close(y, want, mag, dtype) -> bool:
    """test_moe_experts' bound: 64 ulps of the sum of |terms| (a wrong expert is off by
    O(that sum)), plus a bf16 output's own rounding."""
    rtol = 2.0 ** -8 if dtype == mx.bfloat16 else 0.0
    return numpy_ref.close(to_np(y), want, 64 * ULP32 * mag + 1e-30, rtol)


def _args(seed, case, options, dtype):
    (N, E, k, D, hidden, group, pad), (shared, residual, normalize, rows) = case, options
    x, logits, experts, gate, res, route_rows = _make(seed, N, E, k, D, hidden, group, pad,
                                                      dtype, shared, residual, rows)
    return x, logits, k, normalize, experts, gate, res, route_rows


@pytest.mark.parametrize("case, options", SMALL)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_matches_numpy(case, options, dtype, cpu_stream):
    args = _args(0, case, options, dtype)
    assert _close(mb.reference(*args), *_expected(*args), dtype)


@pytest.mark.parametrize("case, options", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_numpy(backend, case, options, dtype):
    args = _args(1, case, options, dtype)
    x, logits, k, _, experts, gate, res, rows = args
    # past MAX_ROWS the dispatcher declines (speed, 6d69d33); the kernel is still right there
    assert mb.applies(x, logits, k, experts, gate, res, rows) == (x.shape[0] <= mb.MAX_ROWS)
    assert _close(mb.kernel(*args, backend=backend), *_expected(*args), dtype)


@pytest.mark.parametrize("case, options", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_is_the_routing_kernel_then_the_experts_kernel_bit_for_bit(backend, case,
                                                                          options, dtype):
    """The same arithmetic in the same order: equal to the last bit on CUDA, ties
    included. (Metal may compile with fast math, free to reassociate a sum differently
    in two kernels: there one rounding of the output apart.)"""
    x, logits, k, normalize, experts, gate, res, rows = _args(2, case, options, dtype)
    idx, w = mr.kernel(logits, k, normalize, backend=backend)
    if rows is not None:
        idx, w = idx[rows], w[rows]
    two = to_np(me.kernel(x, idx, w, experts, gate, res, backend=backend))
    one = to_np(mb.kernel(x, logits, k, normalize, experts, gate, res, rows, backend=backend))
    if backend == "cuda":
        assert np.array_equal(one, two)
    else:
        assert numpy_ref.close(one, two, 0.0, 2.0 ** -7 if dtype == mx.bfloat16 else 2.0 ** -20)


def _joined(logits, gate, pad: int = 5):
    """The router's joined output as the model hands it over unsplit: logits, the shared
    gate in column E, then padding rows' columns (the GPU pads joined projections)."""
    N = logits.shape[0]
    return mx.concatenate([logits, gate, mx.full((N, pad), 7.0, logits.dtype)], axis=1)


@pytest.mark.parametrize("case, options", [(GRID[0], OPTIONS[0]), (GRID[1], OPTIONS[3])])
def test_the_joined_router_output_is_the_split_one_bit_for_bit(backend, case, options):
    """The logits as the first E columns and the shared gate as column E of one array
    (shared_gate_col): the same launch reading other addresses, equal to the last bit."""
    x, logits, k, normalize, experts, gate, res, rows = _args(6, case, options, mx.bfloat16)
    wide = _joined(logits, gate)
    E = logits.shape[1]
    split = to_np(mb.kernel(x, logits, k, normalize, experts, gate, res, rows,
                            backend=backend))
    joined = to_np(mb.kernel(x, wide, k, normalize, experts, wide, res, rows,
                             backend=backend, shared_gate_col=E))
    assert np.array_equal(joined, split)


def test_the_reference_reads_the_joined_router_output_as_the_split_one(cpu_stream):
    x, logits, k, normalize, experts, gate, res, rows = _args(7, (2, 64, 4, 256, 256, 64, 0),
                                                              OPTIONS[3], mx.float32)
    wide = _joined(logits, gate)
    split = mb.reference(x, logits, k, normalize, experts, gate, res, rows)
    joined = mb.reference(x, wide, k, normalize, experts, wide, res, rows,
                          shared_gate_col=logits.shape[1])
    assert np.array_equal(to_np(joined), to_np(split))


def test_dispatcher_matches_numpy(backend):
    args = _args(3, GRID[1], OPTIONS[3], mx.bfloat16)
    assert _close(KernelSet(backend).moe_block(*args), *_expected(*args), mx.bfloat16)


def test_planted_faults_are_caught():
    """A slightly wrong element, and one token's last expert swapped for the next one."""
    case = (2, 64, 4, 256, 256, 64, 0)
    args = _args(4, case, OPTIONS[0], mx.float32)
    with mx.stream(mx.cpu):
        y = np.array(to_np(mb.reference(*args)))
    want, mag = _expected(*args)
    assert _close(mx.array(y), want, mag, mx.float32)
    y[1, 7] += 1e-3 * np.abs(want).max()
    assert not _close(mx.array(y), want, mag, mx.float32)
    x, logits, k, normalize, experts, gate, res, _ = args
    idx, w = numpy_ref.moe_route(to_np(logits), k, normalize)
    idx[0, -1] = next(e for e in range(64) if e not in idx[0])
    with mx.stream(mx.cpu):
        wrong = me.reference(x, mx.array(idx), mx.array(w), experts, gate, res)
    assert not _close(wrong, want, mag, mx.float32)


def test_shapes_outside_the_contract_decline(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("launched a call it should have declined")
    monkeypatch.setattr(mb, "kernel", refuse)
    x, logits, k, normalize, experts, gate, res, _ = _args(5, (2, 64, 4, 256, 256, 64, 0),
                                                           OPTIONS[0], mx.float32)
    ks = KernelSet("cuda")

    def call(**change):
        a = dict(x=x, logits=logits, k=k, normalize=normalize, experts=experts,
                 shared_gate=gate, residual=res, route_rows=None)
        return ks.moe_block(**{**a, **change})
    assert NO_KERNELS.moe_block(x, logits, k, normalize, experts, gate, res) is None
    assert KernelSet("cuda", (("moe_block", "test"),)).moe_block(
        x, logits, k, normalize, experts, gate, res) is None
    assert call(logits=mx.zeros((2, 48))) is None                  # fewer logits than experts
    assert call(experts=replace(experts, gate_up=tuple(a[:48] for a in experts.gate_up),
                                down=tuple(a[:48] for a in experts.down))) is None  # E % 32
    # the router's joined output: the logits its first E columns, the gate column E
    wide = _joined(logits, gate)
    assert mb.applies(x, wide, k, experts, wide, res, None, shared_gate_col=64)
    assert call(shared_gate=wide) is None                          # a [N, 1] gate, or a column
    assert call(logits=wide, shared_gate=wide, shared_gate_col=wide.shape[1]) is None
    assert call(logits=mx.zeros((2, 64)), k=33) is None            # k > 32
    assert call(logits=logits[:1]) is None                         # a row per token
    assert call(logits=logits[None]) is None                       # [N, E] only
    assert call(route_rows=mx.array([0, 0, 1], mx.int32)) is None  # a row per token
    assert call(route_rows=mx.array([0, 0], mx.int64)) is None     # int32 only
    many = mx.zeros((me.MAX_PAIRS // k + 1, 256))                  # a prefill chunk's tokens
    assert call(x=many, logits=mx.zeros((many.shape[0], 64)), shared_gate=None,
                residual=None, experts=_experts(64, 256, 256, 64, 0, mx.float32)[0]) is None
    assert call(experts=replace(experts, bits=8)) is None
    assert call(shared_gate=None) is None                          # a shared expert, no gate
    assert call(residual=x[:1]) is None


def test_the_real_decode_shapes_apply():
    experts = me.QuantExperts(
        (mx.zeros((256, 1024, 256), mx.uint32), mx.zeros((256, 1024, 32)), mx.zeros((256, 1024, 32))),
        (mx.zeros((256, 2048, 64), mx.uint32), mx.zeros((256, 2048, 8)), mx.zeros((256, 2048, 8))),
        512, 64, shared=((mx.zeros((1024, 256), mx.uint32), mx.zeros((1024, 32)),
                          mx.zeros((1024, 32))),
                         (mx.zeros((2048, 64), mx.uint32), mx.zeros((2048, 8)),
                          mx.zeros((2048, 8)))))
    for B in (1, 2, 4, 8, 16, 32):
        x, joined = mx.zeros((B, 2048)), mx.zeros((B, 384), mx.bfloat16)
        rows = mx.zeros((B,), mx.int32)
        # at most MAX_ROWS token rows: past them the routing in every warp costs more
        # than the launch it saves (kernels/moe_block.py), the model routes first
        assert mb.applies(x, joined[:, :256], 8, experts, joined[:, 256:257], x,
                          rows) == (B <= mb.MAX_ROWS), B
    assert not mb.applies(mx.zeros((64, 2048)), mx.zeros((64, 256)), 8, experts,
                          mx.zeros((64, 1)))


# -- the model's block ---------------------------------------------------------------

def _moe_block(seed=0, hidden=128):
    """A quantized block as loaded (joined projections; hidden 128 > group 64, so the CUDA
    one-group guard leaves the shared expert quantized), E = 32: the kernels' router."""
    mx.random.seed(seed)
    block = SparseMoeBlock(dims=128, hidden=hidden, shared_hidden=hidden, num_experts=32,
                           top_k=4, norm_topk_prob=True)
    nn.quantize(block, group_size=64, bits=4)
    block.fuse_projections()
    cuda_qmm_guard.apply(block)
    return block


def _only(backend, *names):
    return KernelSet(backend, tuple((n, "test") for n in NAMES if n not in names))


def test_the_moe_block_routes_inside_the_kernel_as_its_plain_path_routes(monkeypatch):
    """Wiring, on any machine: the fused kernel's contract (its reference) on the block's
    own logits and experts gives the block's plain output; padding rows reach it as
    route_rows, and the real rows are unchanged by them."""
    calls = []

    def fused(*a, backend, shared_gate_col=0):
        calls.append(a[-1])
        return mb.reference(*a, shared_gate_col=shared_gate_col)
    monkeypatch.setattr(mb, "kernel", fused)
    block = _moe_block()
    x = mx.random.normal((3, 1, 128), key=mx.random.key(1))
    residual = mx.random.normal((3, 1, 128), key=mx.random.key(2))
    rows = mx.array([0, 1, 0], mx.int32)                       # row 2: padding
    plain = [block(x), block(x, residual), block(x, residual, route_rows=rows)]
    block.kernel_set = _only("cuda", mb.NAME)
    fused_out = [block(x), block(x, residual), block(x, residual, route_rows=rows)]
    assert [c is None for c in calls] == [True, True, False]
    for got, want in zip(fused_out, plain):
        np.testing.assert_allclose(np.array(got[:2]), np.array(want[:2]), rtol=1e-5, atol=1e-5)


def test_the_moe_block_counts_two_launches_and_no_gather_for_padding_rows():
    block = _moe_block()
    block.kernel_set = KernelSet(COUNT)
    x = mx.zeros((4, 1, 128))
    for rows in (None, mx.array([0, 1, 0, 0], mx.int32)):
        with gpu_graph() as ledger:
            out = block(x, x, route_rows=rows)
            ops = ops_by_primitive(out)
        assert ledger.calls == {"moe_block": 2}
        assert "Gather" not in ops, ops
    block.kernel_set = KernelSet(COUNT, ((mb.NAME, "test"),))    # as before: route first
    with gpu_graph() as ledger:
        block(x, x)
    assert ledger.calls == {"moe_route": 1, "moe_experts": 2}


def test_kernels_off_the_block_is_its_plain_route_then_experts():
    """With no kernel the block computes what it did before moe_block: the plain
    softmax/top-k routing, the gathered experts, the gated shared expert, the residual."""
    block = _moe_block()
    assert block.kernel_set is NO_KERNELS
    x = mx.random.normal((3, 128), key=mx.random.key(4))
    residual = mx.random.normal((3, 128), key=mx.random.key(5))
    rows = mx.array([0, 1, 0], mx.int32)
    logits, gate = block.gates(x)
    probs = mx.softmax(logits, axis=-1, precise=True)
    idx = mx.argpartition(probs, kth=-4, axis=-1)[:, -4:]
    scores = mx.take_along_axis(probs, idx, axis=-1)
    scores = scores / scores.sum(axis=-1, keepdims=True)
    y = (scores.astype(x.dtype)[:, None, :] @ block.switch_mlp(x, idx[rows].astype(mx.uint32)))
    want = moe_output(y[:, 0], block.shared_expert(x), gate, residual)
    np.testing.assert_array_equal(np.array(block(x, residual, route_rows=rows)), np.array(want))


def test_blocks_the_kernel_cannot_take_keep_the_routing_kernel(monkeypatch):
    """Experts not 4-bit (a float block): moe_block is not asked; moe_route still is."""
    monkeypatch.setattr(mb, "kernel", lambda *a, **k: pytest.fail("moe_block launched"))
    routed = []
    monkeypatch.setattr(mr, "kernel", lambda *a, backend: routed.append(1) or mr.reference(*a))
    mx.random.seed(0)
    block = SparseMoeBlock(dims=64, hidden=32, shared_hidden=32, num_experts=32, top_k=4,
                           norm_topk_prob=True)
    x = mx.random.normal((2, 1, 64), key=mx.random.key(6))
    plain = np.array(block(x))
    block.kernel_set = _only("cuda", mb.NAME, mr.NAME)
    np.testing.assert_allclose(np.array(block(x)), plain, rtol=1e-5, atol=1e-5)
    assert routed == [1]


def test_the_moe_block_on_the_kernel_matches_its_plain_path(backend):
    block = _moe_block()
    x = mx.random.normal((4, 1, 128), key=mx.random.key(7))
    residual = mx.random.normal((4, 1, 128), key=mx.random.key(8))
    plain = np.array(block(x, residual))
    block.kernel_set = _only(backend, mb.NAME)
    np.testing.assert_allclose(np.array(block(x, residual)), plain, rtol=1e-4, atol=1e-4)
