"""kernels/top_p_cut.py (top-p's cut without a sort) against its definition in float64.

The cut is the largest key t with sum(w[key < t]) < target; the last tie is the index
of the last id at t that top-p keeps (ties in id order, as a stable sort would keep
them). Checked independently of both implementations, in float64 numpy: the ids
strictly likelier than the cut hold less than target, and with the cut's own ids they
reach it (`_miss`); the kept set (those ids, and the ties up to the last) holds at least
target, and without its last tie less (`miss`, kernels/bench/cuda_on_cpu_top_p.py).
The reference's float32 sums miss the exact mass by at most (log2 V + 2) ulps of the
row's total (pairwise summation's bound, Higham 4.2, plus the target's own rounding);
the kernel's by at most `tpc.depth(V)` roundings (its summation tree, derived there);
the count of ties kept adds two roundings (target - before, and the division by the
ties' weight). A cut one present key off misses by that key's weight, orders of
magnitude more on these rows; a tie more or less by the tie's weight.
"""
import shutil

import mlx.core as mx
import numpy as np
import pytest

import kernels.top_p_cut as tpc
from engine.core import sampler
from engine.sampling_params import SamplingParams
from kernels.bench.cuda_on_cpu_top_p import miss
from kernels.kernel_set import KernelSet
from kernels.selftest_checks_sampling import check_top_p_cut
from kernels.stand_in import COUNT, gpu_graph

# (rows, V, logit scale, top_p): the real vocabularies, a flat row, a peaked one; row 1's
# ties (where there is one) straddle the target in the rows of STRADDLE
GRID = [(1, 248_320, 3 / 0.7, 0.95), (3, 49_152, 3 / 0.7, 0.95), (2, 5003, 0.2, 0.5),
        (4, 300, 12.0, 0.9), (2, 64, 1.0, 0.999), (2, 49_152, 3.0, 0.95)]
STRADDLE = [GRID[2], GRID[5]]


def _rows(rows, V, scale, top_p, seed=0):
    """(key, weights, target) as the sampler builds them, numpy; ties in row 1 and dropped
    (-inf) ids in row 2 where there are such rows."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((rows, V)).astype(np.float32) * scale
    if rows > 1:
        logits[1] = np.round(logits[1] * 2) / 2
    if rows > 2:
        logits[2, ::37] = -np.inf
    d = logits - logits.max(-1, keepdims=True)
    w = np.exp2(d * np.float32(1.4426950408889634)).astype(np.float32)
    key = (np.float32(0) - d).view(np.int32)
    target = (top_p * w.astype(np.float64).sum(-1, keepdims=True)).astype(np.float32)
    return key, w, target


def _miss(key, w, target, cut) -> float:
    """max over rows of how far the cut misses its definition, as a share of the mass."""
    w64, cut = w.astype(np.float64), np.asarray(cut).reshape(-1, 1)
    below = np.where(key < cut, w64, 0).sum(-1)
    upto = np.where(key <= cut, w64, 0).sum(-1)
    t = target.astype(np.float64).ravel()
    return float(np.max(np.maximum(below - t, t - upto) / w64.sum(-1)))


def _bound(V: int) -> float:
    return (np.log2(V) + 2) * 2.0 ** -23


def _kernel_bound(V: int, backend: str) -> float:
    return tpc.depth(V, backend) * 2.0 ** -24


_TIES_ROUNDING = 2 * 2.0 ** -24     # the count of ties kept: target - before, then / weight


@pytest.mark.parametrize("case", GRID)
def test_reference_meets_the_definition(case, cpu_stream):
    key, w, target = _rows(*case)
    out = np.array(tpc.reference(mx.array(key), mx.array(w), mx.array(target)))
    assert out.shape == (case[0], 2)
    assert _miss(key, w, target, out[:, 0]) <= _bound(case[1])
    assert miss(key, w, target, out) <= _bound(case[1]) + _TIES_ROUNDING


@pytest.mark.parametrize("case", GRID)
def test_kernel_meets_the_definition(backend, case):
    key, w, target = _rows(*case)
    out = np.array(tpc.kernel(mx.array(key), mx.array(w), mx.array(target), backend=backend))
    assert _miss(key, w, target, out[:, 0]) <= _kernel_bound(case[1], backend)
    assert miss(key, w, target, out) <= _kernel_bound(case[1], backend) + _TIES_ROUNDING


def test_the_tie_rows_keep_some_of_their_ties_not_all(cpu_stream):
    """Not vacuous: on these rows with ties (row 1: logits in steps of 0.5), the cut's
    ties straddle the target, so the last tie falls strictly inside them."""
    for case in STRADDLE:
        key, w, target = _rows(*case)
        cut, last = np.array(tpc.reference(mx.array(key), mx.array(w), mx.array(target)))[1]
        tied = np.flatnonzero(key[1] == cut)
        assert len(tied) > 10 and tied[0] <= last < tied[-1] and last in tied


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to run the CUDA body with")
def test_the_cuda_launches_run_on_the_cpu(tmp_path):
    """kernels/bench/cuda_on_cpu_top_p.py: the CUDA path's 10 launches as the GPU runs
    them (several blocks a row, a row of V % 4 != 0 and one of V % 4 == 0, ties, dropped
    ids), each cut against its definition in float64 (g++ shim)."""
    from kernels.bench.cuda_on_cpu_top_p import emulate
    for case in [(3, 5003, 3.0, 0.95), (3, 8192, 0.2, 0.5)]:
        key, w, target = _rows(*case)
        out = emulate(key, w, target.ravel(), str(tmp_path))
        assert _miss(key, w, target, out[:, 0]) <= _kernel_bound(case[1], "cuda")
        assert miss(key, w, target, out) <= _kernel_bound(case[1], "cuda") + _TIES_ROUNDING


def test_the_cuda_path_is_ten_launches_of_three_compiled_kernels():
    """A deterministic signature of the CUDA path: 8 passes, the last decision with the
    ties' counts, and the last tie (LAUNCHES, what the op count of the app's sampling
    counts), all 8 passes one kernel instance (one compile on a cold start, not 8), at
    any batch."""
    for rows in (1, 8):
        key, w, target = (mx.array(a) for a in _rows(rows, 5003, 3.0, 0.95))
        with gpu_graph() as ledger:
            tpc.kernel(key, w, target, backend=COUNT)
        assert tpc.LAUNCHES == 10 and ledger.calls == {tpc.NAME: tpc.LAUNCHES}
        assert len(ledger.instances) == 3


def test_kernel_gives_a_row_the_same_cut_in_any_batch(backend):
    key, w, target = _rows(3, 49_152, 3 / 0.7, 0.95)
    args = [mx.array(a) for a in (key, w, target)]
    whole = np.array(tpc.kernel(*args, backend=backend)).tolist()
    alone = [np.array(tpc.kernel(*(a[i:i + 1] for a in args), backend=backend))[0].tolist()
             for i in range(3)]
    assert whole == alone


def test_a_planted_fault_is_caught(cpu_stream):
    """The next present key after the right cut (one id more kept) misses the definition."""
    key, w, target = _rows(2, 5003, 3.0, 0.95)
    cut = np.array(tpc.reference(mx.array(key), mx.array(w), mx.array(target)))[:, 0]
    wrong = np.array([key[r][key[r] > cut[r]].min() for r in range(2)])
    assert _miss(key, w, target, wrong) > 100 * _bound(5003)


def test_ties_more_or_fewer_are_caught(cpu_stream):
    """On a flat row whose ties straddle the target (a tie holds 1/5,003 of the row, ~19x
    the bound), a last tie two later or two earlier misses the kept set's definition by
    at least a tie's weight; one off, by a share of it that depends on where the target
    falls in the last tie (the two shares add up to the tie), at least half in one of the
    two. On a 0.95 row of 49,152 ids a tail tie holds less than the bound: which of those
    ties the cut keeps is within float32 rounding of the sums."""
    key, w, target = _rows(*STRADDLE[0])
    out = np.array(tpc.reference(mx.array(key), mx.array(w), mx.array(target)))
    tied = np.flatnonzero(key[1] == out[1, 0])
    at = int(np.flatnonzero(tied == out[1, 1])[0])

    def miss_with(last):
        wrong = out[1:].copy()
        wrong[0, 1] = last
        return miss(key[1:], w[1:], target[1:], wrong)
    bound = _kernel_bound(5003, "cuda")
    assert min(miss_with(tied[at + 2]), miss_with(tied[at - 2])) > 10 * bound
    assert max(miss_with(tied[at + 1]), miss_with(tied[at - 1])) > 5 * bound


def test_the_sampler_takes_the_cut_from_the_kernel_set(monkeypatch):
    """Wiring, on any machine: with a kernel set that runs top_p_cut, top-p's keep mask
    comes from the kernel's cut (here its reference) and equals the bisection's."""
    calls = []
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: calls.append(backend)
                        or tpc.reference(*a))
    logits = mx.array(np.random.default_rng(3).standard_normal((3, 5003)).astype(np.float32) * 3)
    params = [SamplingParams(temperature=0.7, top_p=0.95)] * 3
    plain = np.array(sampler.filtered_probs(logits, params))
    launched = np.array(sampler.filtered_probs(logits, params, KernelSet("cuda")))
    assert calls == ["cuda"]
    np.testing.assert_array_equal(launched, plain)
    off = KernelSet("cuda", ((tpc.NAME, "test"),))
    sampler.filtered_probs(logits, params, off)
    assert calls == ["cuda"]                           # off: the bisection, no launch


def test_the_sampler_keeps_the_ties_the_bisection_keeps(monkeypatch):
    """Wiring of the last tie: on rows whose ties at the cut straddle top-p's target and
    each weigh far more than float32 rounding of the sums (logits in steps of 0.5, a
    flat row), the kernel's kept set (here its reference) is the bisection's, tie for
    tie: the same count of ties, the lowest ids first."""
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: tpc.reference(*a))
    rng = np.random.default_rng(5)
    values = np.round(rng.standard_normal((3, 5003)) * 0.4).astype(np.float32) / 2
    params = [SamplingParams(temperature=1.0, top_p=p) for p in (0.3, 0.5, 0.8)]
    plain = np.array(sampler.filtered_probs(mx.array(values), params)) > 0
    launched = np.array(sampler.filtered_probs(mx.array(values), params,
                                               KernelSet("cuda"))) > 0
    for row, keep in zip(values, plain):                # some of the cut's ties, not all
        cut = row[keep].min()
        assert 0 < (row[keep] == cut).sum() < (row == cut).sum()
    np.testing.assert_array_equal(launched, plain)


def test_the_metal_path_adds_the_last_tie_by_plain_ops(monkeypatch, cpu_stream):
    """Metal launches the cut (one threadgroup a row, with the mass strictly likelier)
    and finds the last tie with `last_tie`'s plain ops: here its launch stands in as the
    reference's cut and that mass, and the pair meets the definition like the CUDA path's."""
    def launch(key, weights, target):
        cut = tpc.reference(key, weights, target)[:, :1]
        return [cut, mx.where(key < cut, weights, 0.0).sum(axis=-1, keepdims=True)]
    monkeypatch.setattr(tpc._METAL, "get", lambda backend: lambda *, inputs, **_: launch(
        *inputs))
    for case in STRADDLE:
        key, w, target = _rows(*case)
        out = np.array(tpc.kernel(mx.array(key), mx.array(w), mx.array(target),
                                  backend="metal"))
        assert out.shape == (case[0], 2)
        assert miss(key, w, target, out) <= _bound(case[1]) + _TIES_ROUNDING


def test_calls_outside_the_contract_decline():
    ks = KernelSet("cuda")
    key, w, target = (mx.array(a) for a in _rows(2, 64, 1.0, 0.9))
    assert ks.top_p_cut(key, w.astype(mx.float16), target) is None
    assert ks.top_p_cut(key, w, target[:1]) is None


def test_the_self_test_check_measures_a_miss(monkeypatch):
    """The start-up self-test's check (kernels/selftest.py) on the reference passes, and
    on a cut one bin wide of it fails."""
    monkeypatch.setattr(tpc, "kernel", lambda *a, backend: tpc.reference(*a))
    assert check_top_p_cut("test") <= 1e-5
    monkeypatch.setattr(tpc, "kernel",
                        lambda *a, backend: tpc.reference(*a) + mx.array([[1 << 20, 0]]))
    assert check_top_p_cut("test") > 2e-3
    monkeypatch.setattr(tpc, "kernel",             # every tie kept: the flat row's ties
                        lambda *a, backend: tpc.reference(*a) * mx.array([[1, 0]]) + 5002)
    assert check_top_p_cut("test") > 2e-3


def test_the_apps_default_sampling_through_the_kernel_keeps_what_the_bisection_keeps(backend):
    """A new chat's settings on Qwen3.5's vocabulary, B = 8: the ids kept with the kernel
    and by the plain bisection differ at most by ids within float32 rounding of the cut."""
    from engine.settings_spec import chat_defaults
    p = SamplingParams.from_settings(chat_defaults())
    logits = mx.array(np.random.default_rng(8).standard_normal((8, 248_320)).astype(np.float32) * 3)
    plain = np.array(sampler.filtered_probs(logits, [p] * 8))
    launched = np.array(sampler.filtered_probs(logits, [p] * 8, KernelSet(backend)))
    differ = (plain > 0) != (launched > 0)
    assert np.where(differ, np.maximum(plain, launched), 0).sum(-1).max() <= _bound(248_320)
